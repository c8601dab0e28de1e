"""The SYNTHETIC T+I / I+I generator: Table 6's named pairs land in their bands; rows say synthetic."""

from __future__ import annotations

import numpy as np
import pytest

from elastico_core.iac.synthetic import BANDS, TABLE6_MIXED, generate, named_decays


@pytest.mark.parametrize(("pair", "da", "db"), named_decays(), ids=[f"{p.a}{p.a_flag}/{p.b}{p.b_flag}" for p in TABLE6_MIXED])
def test_table6_pairs_land_in_their_severity_band(pair, da: float, db: float) -> None:  # type: ignore[no-untyped-def]
    lo, hi = BANDS[pair.severity]
    assert lo <= (da + db) / 2 < hi
    assert da == pytest.approx(pair.decay_a, abs=0.05)
    assert db == pytest.approx(pair.decay_b, abs=0.05)


def test_severity_orders_the_named_pairs() -> None:
    by = {}
    for pair, da, db in named_decays():
        by.setdefault(pair.severity, []).append((da + db) / 2)
    means = [np.mean(by[s]) for s in ("severe", "high", "moderate", "low")]
    assert means == sorted(means)


def test_generated_rows_are_synthetic_mixed_pairs_and_reproducible() -> None:
    a, b = generate(50, seed=7), generate(50, seed=7)
    assert a.frame.equals(b.frame)
    assert a.synthetic_rows == a.rows == 50
    s = a.samples()
    assert s.synthetic.all()
    assert set(s.pair_type) <= {"T+I", "I+I"} and "T+T" not in set(s.pair_type)
    assert (s.y >= 1.0).all()
    assert not generate(50, seed=8).frame.equals(a.frame)


def test_pairs_that_exceed_memory_are_written_as_did_not_fit() -> None:
    ds = generate(80, seed=1, gpu="a100-40gb")
    assert ds.excluded_infeasible > 0
    bad = ds.frame.filter(ds.frame["colo_tput_a"] == 0)
    assert ((bad["fb_used_mb_a"] + bad["fb_used_mb_b"]) > 40960 - 512).all()
