"""Pair sampling (stratified, §3.3.2) and the co-location dataset contract of DESIGN.md."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from elastico_core.model.errors import SpecError
from elastico_core.profiling.colocate import COLUMNS, append_rows, parse_side
from elastico_core.profiling.pairs import STRATA, candidates, sample_pairs, stratum
from elastico_core.rst.catalog import PAPER_WORKLOADS

CONTRACT = ["gpu"] + [
    f"{c}_{x}"
    for x in ("a", "b")
    for c in ("workload", "kind", "knobs", "params", "solo_tput", "colo_tput", "sm_active", "sm_occupancy", "dram_active",
              "fb_used_mb", "tensor_active")
]  # fmt: skip


OPTIONAL = ["gpu_mem_mib", "source"] + [f"{c}_{x}" for x in ("a", "b") for c in ("repeats", "slowdown_min", "slowdown_max")]


def test_columns_are_exactly_the_contract() -> None:
    assert list(COLUMNS) == CONTRACT + OPTIONAL


def test_sampling_is_stratified_seeded_and_sized() -> None:
    cands = candidates(list(PAPER_WORKLOADS.values()), per_workload=2, seed=1)
    assert len(cands) == 24
    pairs = sample_pairs(cands, fraction=0.25, seed=7)
    assert pairs == sample_pairs(cands, fraction=0.25, seed=7)
    counts = {s: sum(stratum(a, b) == s for a, b in pairs) for s in STRATA}
    total = {"T+T": 16 * 17 // 2, "T+I": 16 * 8, "I+I": 8 * 9 // 2}
    for s in STRATA:
        assert counts[s] == round(0.25 * total[s])
    assert all(a.workload.kind.value == "train" for a, b in pairs if stratum(a, b) == "T+I")
    capped = sample_pairs(cands, fraction=0.25, seed=7, max_pairs=6)
    assert len(capped) == 6 and {stratum(a, b) for a, b in capped} == set(STRATA)
    with pytest.raises(SpecError, match="fraction"):
        sample_pairs(cands, fraction=0.0)


def _row(**over: object) -> dict[str, object]:
    row: dict[str, object] = {c: 0.5 for c in CONTRACT}
    row.update(gpu_mem_mib=1024.0, source="measured", sm_occupancy_a=float("nan"))
    row.update(gpu="cpu-x", workload_a="lstm", kind_a="train", knobs_a='{"micro_batch":32}', params_a=10,
               workload_b="qwen-1.7b", kind_b="infer", knobs_b='{"max_num_seqs":1}', params_b=20)  # fmt: skip
    row.update(over)
    return row


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_rows_append_to_one_dataset(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"colo{suffix}"
    append_rows(path, [_row()])
    append_rows(path, [_row(colo_tput_a=0.0, colo_tput_b=0.0)])
    df = pl.read_csv(path) if suffix == ".csv" else pl.read_parquet(path)
    assert df.columns == CONTRACT + OPTIONAL and df.height == 2
    assert df["knobs_a"][0] == '{"micro_batch":32}' and df["sm_occupancy_a"][0] is None  # unknown is empty
    # the IAC importer reads what the profiler appends (one pair ran, one did not fit)
    from elastico_core.iac.dataset import read_dataset

    ds = read_dataset(path)
    assert ds.rows == 2 and ds.excluded_infeasible == 1


def test_a_foreign_dataset_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "colo.csv"
    path.write_text("who,what\n1,2\n")
    with pytest.raises(SpecError, match="does not follow the co-location contract"):
        append_rows(path, [_row()])
    assert path.read_text() == "who,what\n1,2\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("resnet", "unknown workload 'resnet'"),
        ('lstm:{"micro_batch": 3}', "outside the grid"),
        ("lstm:{oops}", "not valid JSON"),
    ],
)
def test_pair_sides_are_validated(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_side(text)


def test_side_defaults_fill_the_knobs() -> None:
    side = parse_side('lstm:{"micro_batch": 64}')
    assert side.knobs.as_dict() == {"amp": False, "checkpointing": False, "dp": 1, "micro_batch": 64}
