"""Gavel's measured pair throughputs as a co-location dataset (the real file; skipped when absent)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from elastico_core.iac.gavel import GAVEL_FAMILIES, convert_gavel, parse_job
from elastico_core.model.errors import SpecError


@pytest.fixture(scope="module")
def converted(gavel_path: Path):  # type: ignore[no-untyped-def]
    return convert_gavel(gavel_path)


def test_one_row_per_unordered_pair_and_gpu(converted, gavel_path: Path) -> None:  # type: ignore[no-untyped-def]
    raw = json.loads(gavel_path.read_text())
    ds = converted.dataset
    # 26 single-GPU job types -> 351 unordered pairs (self-pairs included) per GPU, minus the pairs of
    # a job that cannot run alone on that GPU.
    fits_alone = {
        g: [k for k, v in raw[g].items() if ast.literal_eval(k)[1] == 1 and v["null"] > 0] for g in ("k80", "p100", "v100")
    }
    expected = sum(len(v) * (len(v) + 1) // 2 for v in fits_alone.values())
    assert ds.rows == expected
    assert set(ds.frame["gpu"].unique()) == {"k80", "p100", "v100"}
    assert set(ds.frame["kind_a"].unique()) == {"train"} and ds.synthetic_rows == 0
    assert converted.skipped == ("k80: ResNet-50 (batch size 128)",)


def test_values_come_straight_from_the_table(converted, gavel_path: Path) -> None:  # type: ignore[no-untyped-def]
    raw = json.loads(gavel_path.read_text())
    entry = raw["v100"]["('ResNet-50 (batch size 64)', 1)"]
    colo = entry["('Transformer (batch size 32)', 1)"]
    df = converted.dataset.frame
    hit = df.filter(
        (df["gpu"] == "v100")
        & (df["workload_a"] == "resnet50")
        & (df["knobs_a"].str.contains('"micro_batch":64'))
        & (df["workload_b"] == "transformer")
        & (df["knobs_b"].str.contains('"micro_batch":32'))
    )
    if hit.height == 0:  # stored the other way round
        hit = df.filter((df["gpu"] == "v100") & (df["workload_b"] == "resnet50") & (df["workload_a"] == "transformer")
                        & df["knobs_b"].str.contains('"micro_batch":64') & df["knobs_a"].str.contains('"micro_batch":32'))
        colo = colo[::-1]
        solo = raw["v100"]["('Transformer (batch size 32)', 1)"]["null"]
    else:
        solo = entry["null"]
    assert hit.height == 1
    assert hit["colo_tput_a"][0] == pytest.approx(colo[0]) and hit["colo_tput_b"][0] == pytest.approx(colo[1])
    assert hit["solo_tput_a"][0] == pytest.approx(solo)


def test_did_not_fit_pairs_are_reported_and_excluded(converted) -> None:  # type: ignore[no-untyped-def]
    ds = converted.dataset
    assert ds.excluded_infeasible > 0
    s = ds.samples()
    assert len(s) == 2 * (ds.rows - ds.excluded_infeasible)
    assert (s.y >= 1.0).all() and np.isfinite(s.X[:, 5:8]).all()
    assert np.isnan(s.X[:, :5]).all()  # Gavel recorded no hardware counters
    no_batch = np.isnan(s.X[:, 8])  # micro-batch: only A3C has none
    assert no_batch.any() and all("a3c" in g for g in s.group[no_batch])
    assert len(set(s.group)) == len(GAVEL_FAMILIES) * (len(GAVEL_FAMILIES) + 1) // 2


def test_job_keys_parse_and_unknown_types_are_refused() -> None:
    job, scale = parse_job("('LM (batch size 20)', 1)", where="t")
    assert (job.family.workload, job.batch, scale) == ("lstm", 20, 1)
    job, _ = parse_job("('CycleGAN', 1)", where="t")
    assert job.batch == 1
    with pytest.raises(SpecError, match="unknown Gavel job type 'GPT-5'"):
        parse_job("('GPT-5', 1)", where="t")
    with pytest.raises(SpecError, match="not a \\(name, scale_factor\\) tuple"):
        parse_job("ResNet", where="t")


def test_not_a_gavel_file(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"a100": {}}')
    with pytest.raises(SpecError, match="not a Gavel throughput table"):
        convert_gavel(path)
