"""The trace CSV contract: validation errors name the row, the mapping is seeded and order-free."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastico_core.bench.instances import make_cluster
from elastico_core.model.errors import SpecError
from elastico_core.model.workload import JobKind
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.profiles import ProfileBook
from elastico_core.sim.trace import build_jobs, load_trace, map_workload, supported_dp, write_trace
from tests.sim.sim_helpers import make_trace, write_csv

HEADER = ("job_id", "submit_time_s", "duration_s", "num_gpus", "kind")


@pytest.mark.parametrize(
    ("rows", "header", "match"),
    [
        ([("a", 0, 60, 1)], HEADER[:4], r"missing columns \['kind'\]"),
        ([("a", 0, -5, 1, "train")], HEADER, r"line 2 \(job 'a'\): duration_s: must be > 0"),
        ([("a", 0, 60, 1, "train"), ("b", 3, 60, 1, "serve")], HEADER, r"line 3 \(job 'b'\): kind: unknown kind 'serve'"),
        ([("a", -1, 60, 1, "train")], HEADER, r"submit_time_s: must be >= 0"),
        ([("a", 0, 60, 1.5, "train")], HEADER, r"num_gpus: must be an integer >= 1"),
        ([("a", 0, "x", 1, "train")], HEADER, r"duration_s: must be a number"),
        ([("a", 0, 60, 1, "train"), ("a", 1, 60, 1, "train")], HEADER, r"line 3 \(job 'a'\): job_id: duplicate job_id \(first on line 2\)"),
    ],
    ids=["missing-column", "negative-duration", "unknown-kind", "negative-submit", "fractional-gpus",
         "non-numeric", "duplicate-id"],
)
def test_bad_rows_name_the_row(tmp_path: Path, rows: list[tuple[object, ...]], header: tuple[str, ...], match: str) -> None:
    path = write_csv(tmp_path / "bad.csv", header, rows)
    with pytest.raises(SpecError, match=match):
        load_trace(path)


def test_unknown_and_mismatched_workloads(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "w.csv", (*HEADER, "workload"), [("a", 0, 60, 1, "train", "gpt-9")])
    with pytest.raises(SpecError, match="unknown workload 'gpt-9'"):
        load_trace(path)
    path = write_csv(tmp_path / "w.csv", (*HEADER, "workload"), [("a", 0, 60, 1, "train", "qwen-1.7b")])
    with pytest.raises(SpecError, match="is a infer workload, row says train"):
        load_trace(path)


def test_gpus_beyond_the_cluster_name_the_row(store: ProfileStore) -> None:
    trace = make_trace([("small", 0, 60, 1, "train"), ("huge", 0, 60, 16, "train")])
    cluster = make_cluster(8)
    with pytest.raises(SpecError, match=r"line 3 \(job 'huge'\): num_gpus: asks for 16 GPUs, the cluster has 8"):
        build_jobs(trace, cluster, ProfileBook.for_cluster(store, cluster))


def test_empty_files_are_empty_traces(tmp_path: Path) -> None:
    (tmp_path / "empty.csv").write_text("")
    assert len(load_trace(tmp_path / "empty.csv")) == 0
    header_only = write_csv(tmp_path / "h.csv", HEADER, [])
    assert len(load_trace(header_only)) == 0


def test_missing_file_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read trace"):
        load_trace(tmp_path / "nope.csv")


def test_mapping_is_seeded_and_independent_of_other_rows() -> None:
    rows = [(f"j{i}", i, 60, 1, "train" if i % 2 else "infer") for i in range(12)]
    a = make_trace(rows, seed=7)
    b = make_trace(list(reversed(rows))[:5], seed=7)
    by_id = {j.job_id: j.workload for j in a.jobs}
    assert all(by_id[j.job_id] == j.workload for j in b.jobs)
    assert all(j.mapped for j in a.jobs)
    for j in a.jobs:
        assert PAPER_WORKLOADS[j.workload].kind is j.kind
        assert map_workload(j.job_id, j.kind, 7) == j.workload
    c = make_trace(rows, seed=8)
    assert [j.workload for j in c.jobs] != [j.workload for j in a.jobs]


def test_work_reproduces_the_trace_duration_at_the_default_configuration(store: ProfileStore) -> None:
    trace = make_trace([("a", 0, 600, 3, "train", "resnet50"), ("b", 5, 300, 1, "infer", "qwen-1.7b")])
    cluster = make_cluster(8)
    book = ProfileBook.for_cluster(store, cluster)
    jobs = build_jobs(trace, cluster, book, floor_frac=0.5)
    a, b = jobs
    assert a.dp == 2 and a.spec.max_gpus == 2  # a 3-GPU request runs data-parallel on 2
    prof = book.profile(a.spec.workload, a.default_knobs)
    assert prof is not None and a.spec.work == pytest.approx(600 * prof.throughput)
    assert a.spec.floor == pytest.approx(0.5 * prof.throughput)
    assert b.spec.kind is JobKind.INFER and b.norm_work == 300
    assert [supported_dp(n) for n in (1, 2, 3, 5, 8, 16)] == [1, 2, 2, 4, 8, 8]


def test_write_then_load_round_trips(tmp_path: Path) -> None:
    trace = make_trace([("a", 0, 60, 1, "train", "bert", "u1"), ("b", 2.5, 30, 1, "infer")])
    back = load_trace(write_trace(trace, tmp_path / "t.csv"))
    assert [(j.job_id, j.submit_time_s, j.duration_s, j.workload, j.user) for j in back.jobs] == [
        (j.job_id, j.submit_time_s, j.duration_s, j.workload, j.user) for j in trace.jobs
    ]
