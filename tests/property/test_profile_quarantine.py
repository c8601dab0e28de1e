"""Corrupted profile files never fail, block or crash planning: bad rows are quarantined, the rest is used.

Each example copies a slice of the shipped a100-40gb profiles, corrupts it (NaN, inf, null, a negative or
wrongly typed value, a truncated file) and plans jobs against it: every job is placed or queued with a
reason, no placement carries a non-finite figure, and every corrupted row is reported.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from elastico_core.iac.predictor import NoInterference
from elastico_core.model import JobSpec, narrow_space
from elastico_core.pds.planner import Planner, PlanningInput
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.store import ProfileStore
from tests.conftest import REPO
from tests.property.test_planner_invariants import check

SOURCE = REPO / "profiles" / "a100-40gb_40960_any_any.parquet"
BASE = pl.read_parquet(SOURCE).filter(pl.col("workload").is_in(["resnet50", "bert", "qwen-1.7b"]))
NUMERIC = ["sm", "gpu_mem_mib", "cpu_cores", "host_mem_mib", "throughput"]
BAD_VALUES: list[object] = [math.nan, math.inf, -math.inf, None, -5.0, "lots"]


def _jobs() -> tuple[JobSpec, ...]:
    out = []
    for i, name in enumerate(["resnet50", "bert", "qwen-1.7b", "resnet50"]):
        w = PAPER_WORKLOADS[name]
        out.append(JobSpec(f"j{i}", w, narrow_space(w, {}, 1), floor=0.0, max_gpus=1, submit_time_s=float(i)))
    return tuple(out)


def _corrupt(df: pl.DataFrame, column: str, value: object, rows: list[int]) -> pl.DataFrame:
    values = df[column].to_list()
    for r in rows:
        values[r] = value
    dtype = pl.String if isinstance(value, str) else pl.Float64
    if dtype is pl.String:
        values = [v if isinstance(v, str) else (None if v is None else str(v)) for v in values]
    return df.with_columns(pl.Series(column, values, dtype=dtype, strict=False))


@settings(max_examples=30)
@given(
    column=st.sampled_from(NUMERIC),
    value=st.sampled_from(BAD_VALUES),
    rows=st.lists(st.integers(0, BASE.height - 1), min_size=1, max_size=40, unique=True),
    truncate=st.booleans(),
    data=st.data(),
)
def test_planning_survives_corrupted_profiles(
    tmp_path_factory, column: str, value: object, rows: list[int], truncate: bool, data: st.DataObject  # type: ignore[no-untyped-def]
) -> None:
    root: Path = tmp_path_factory.mktemp("profiles")
    path = root / SOURCE.name
    _corrupt(BASE, column, value, rows).write_parquet(path)
    if truncate:  # a second file cut short mid-write: skipped as a whole, named in problems
        shutil.copy(path, root / "cut.parquet")
        blob = (root / "cut.parquet").read_bytes()
        (root / "cut.parquet").write_bytes(blob[: data.draw(st.integers(0, len(blob) - 1))])
    store = ProfileStore.open(root)
    bad = store.quarantined()
    assert {q.row for q in bad} == set(rows), (column, value)
    assert all(q.reason and column in q.reason for q in bad)
    assert any("quarantined" in str(p) for p in store.problems)
    assert store.frame().height == BASE.height - len(rows)
    if truncate:
        assert any("cut.parquet" in str(p) for p in store.problems)

    specs = _jobs()
    inp = PlanningInput(_cluster(), specs)
    plan = Planner(store, NoInterference()).plan(inp)
    check(plan, inp)
    for p in plan.placements:
        assert math.isfinite(p.throughput) and math.isfinite(p.resources.gpu_mem_mib)


def _cluster():  # type: ignore[no-untyped-def]
    from elastico_core.model import Cluster, Node, gpu_model

    return Cluster("c", (Node("n0", gpu_model("a100-40gb"), 2, 32.0, 256 * 1024.0),))
