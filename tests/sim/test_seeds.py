"""Several seeds of one comparison: parsing, means and ranges, per-seed claims, the JSON document."""

from __future__ import annotations

import math
from dataclasses import fields, replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastico_core.model.errors import SpecError
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.metrics import JSON_KEYS, PolicyMetrics
from elastico_core.sim.report import claims_table, seeds_table, table4_seeds, table5_seeds
from elastico_core.sim.seeds import SeedSummary, Spread, parse_seeds
from tests.sim.sim_helpers import write_csv


def _metrics(policy: str, jct: float, throughput: float = 10.0, sm: float = 0.4) -> PolicyMetrics:
    zero = {f.name: 0 for f in fields(PolicyMetrics)}
    base = PolicyMetrics(**{**zero, "policy": policy, "gpus": 8, "jobs_total": 10, "jobs_finished": 10})  # type: ignore[arg-type]
    return replace(base, avg_jct_s=jct, median_jct_s=jct / 2, p95_jct_s=jct * 3, throughput=throughput, sm_util=sm, attainment=1.0)


def _summary() -> SeedSummary:
    # seed 0: ElastiCo at half Volcano's JCT, seed 1: at an eighth; w/o PDS ahead of ElastiCo on seed 0 only
    per_seed = {
        0: {"volcano": _metrics("volcano", 1000.0, 10.0, 0.5), "lucid": _metrics("lucid", 800.0, 9.9, 0.5),
            "elastico": _metrics("elastico", 500.0, 10.2, 0.4), "elastico-no-pds": _metrics("elastico-no-pds", 490.0)},
        1: {"volcano": _metrics("volcano", 4000.0, 10.0, 0.5), "lucid": _metrics("lucid", 2000.0, 10.1, 0.5),
            "elastico": _metrics("elastico", 500.0, 11.0, 0.4), "elastico-no-pds": _metrics("elastico-no-pds", 520.0)},
    }
    return SeedSummary((0, 1), "volcano", per_seed)


@pytest.mark.parametrize(
    ("raw", "seeds"),
    [("3", (3,)), ("0-3", (0, 1, 2, 3)), ("0,2,1", (0, 2, 1)), ("0-2, 1, 7", (0, 1, 2, 7)), ("4-4", (4,))],
)
def test_parse_seeds(raw: str, seeds: tuple[int, ...]) -> None:
    assert parse_seeds(raw) == seeds


@pytest.mark.parametrize(("raw", "match"), [("", "no seed"), ("a", "expected seeds"), ("5-2", "first <= last"),
                                             ("-1", "expected seeds|first <= last"), ("0-99", "at most 64")])
def test_parse_seeds_refuses(raw: str, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_seeds(raw)


def test_ratios_are_per_seed_with_geometric_mean() -> None:
    s = _summary()
    r = s.ratio("elastico", "avg_jct")
    assert r.low == pytest.approx(0.125) and r.high == pytest.approx(0.5)
    assert r.mean == pytest.approx(0.25)  # sqrt(0.5 x 0.125), not the arithmetic 0.3125
    assert s.ratio("elastico-no-pds", "avg_jct", "elastico").low == pytest.approx(0.98)
    m = s.metric("volcano", "avg_jct_s")
    assert (m.mean, m.low, m.high) == (2500.0, 1000.0, 4000.0)


def test_claims_count_the_seeds_they_hold_on() -> None:
    claims = {(c.policy, c.other, c.figure): c.held for c in _summary().claims()}
    assert claims[("lucid", "volcano", "avg_jct")] == 2
    assert claims[("elastico", "lucid", "avg_jct")] == 2
    assert claims[("elastico", "volcano", "avg_jct")] == 2
    assert claims[("lucid", "volcano", "throughput")] == 1  # 9.9 < 10 on seed 0
    assert claims[("elastico", "volcano", "sm_util")] == 0
    assert claims[("elastico", "elastico-no-pds", "avg_jct")] == 1


def test_json_document_keeps_the_one_seed_keys() -> None:
    doc = _summary().as_json()
    assert doc["baseline"] == "volcano" and doc["seeds"] == [0, 1]
    policies = doc["policies"]
    assert isinstance(policies, dict) and set(policies) == {"volcano", "lucid", "elastico", "elastico-no-pds"}
    for m in policies.values():
        assert tuple(m) == JSON_KEYS
    assert policies["volcano"]["avg_jct_s"] == 2500.0
    assert doc["vs_baseline"]["elastico"]["avg_jct"] == {"mean": 0.25, "min": 0.125, "max": 0.5}  # type: ignore[index]
    assert set(doc["per_seed"]) == {"0", "1"}  # type: ignore[arg-type]
    assert "elastico-no-pds" in doc["vs_elastico"]  # type: ignore[operator]
    assert any(c["claim"] == "elastico avg_jct lower than elastico-no-pds" and c["held"] == 1 for c in doc["claims"])  # type: ignore[attr-defined]


def test_report_tables() -> None:
    s = _summary()
    t4, t5, claims, per_seed = table4_seeds(s), table5_seeds(s), claims_table(s), seeds_table(s)
    assert t4 is not None and t5 is not None and claims is not None
    assert t4.rows[2][1] == "0.25x (0.12-0.50)"
    assert t5.rows[1][0] == "w/o PDS" and t5.rows[1][1].startswith("1.01x (0.98-1.04)")
    assert ("ElastiCo below w/o PDS", "average JCT", "1 of 2") in claims.rows
    assert [r[0] for r in per_seed.rows] == ["0", "1"]


def test_summary_refuses_mismatched_seeds() -> None:
    s = _summary()
    with pytest.raises(ValueError, match="exactly the seeds"):
        SeedSummary((0, 1, 2), "volcano", s.per_seed)
    with pytest.raises(ValueError, match="same policies"):
        SeedSummary((0, 1), "volcano", {0: s.per_seed[0], 1: {"volcano": s.per_seed[1]["volcano"]}})
    with pytest.raises(ValueError, match="baseline"):
        SeedSummary((0, 1), "greedy", s.per_seed)


@given(st.lists(st.floats(min_value=1e-3, max_value=1e3), min_size=1, max_size=20))
def test_geometric_mean_lies_within_the_range(values: list[float]) -> None:
    sp = Spread.of(values, geometric=True)
    assert sp.low <= sp.mean * (1 + 1e-9) and sp.mean <= sp.high * (1 + 1e-9)
    assert Spread.of(values).mean >= sp.mean * (1 - 1e-9)  # AM >= GM


def test_spread_of_nothing_is_nan() -> None:
    assert math.isnan(Spread.of([], geometric=True).mean)
    assert Spread.of([math.nan]).as_json() == {"mean": None, "min": None, "max": None}


def test_trace_source(tmp_path: Path, store: ProfileStore) -> None:
    from elastico_core.sim.runner import TraceSource

    csv = write_csv(tmp_path / "t.csv", ("job_id", "submit_time_s", "duration_s", "num_gpus", "kind"),
                    [("a", 0, 60, 1, "train"), ("b", 90, 60, 1, "infer")])
    assert TraceSource(str(csv), gpus=4).span_hint_s(store) == pytest.approx(90.0)
    assert TraceSource("builtin:paper-mix", gpus=8, hours=2.0).span_hint_s(store) == 7200.0
    assert len(TraceSource(str(csv), gpus=4).trace(3, store)) == 2
    with pytest.raises(SpecError, match="unknown built-in trace"):
        TraceSource("builtin:nope", gpus=4).trace(0, store)
    with pytest.raises(SpecError, match="fraction of jobs kept"):
        TraceSource("philly:x.csv", gpus=4, load=2.0).trace(0, store)
