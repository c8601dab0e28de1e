"""Runtime pairs: a co-located window in the measurements becomes a contract row (source=runtime)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import sqlalchemy as sa

from elastico_core.state import JobService, StateStore
from elastico_core.state.models import Measurement
from elastico_core.state.runtime_pairs import collect_runtime_pairs

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
SIG = "a100-80gb|81920|550.54|torch-2.11.0"


def _report(job: str, workload: str, knobs: dict, tput: float, colo: bool, minute: int) -> dict:
    return {"job_id": job, "token": f"{job}-t", "kind": "progress", "workload": workload, "knobs": knobs,
            "gpu_model": "a100-80gb", "signature": SIG, "gpu_id": "n0/0", "throughput": tput, "predicted_throughput": 1.0,
            "predicted_slowdown": 1.0, "colocated": colo, "budget_mib": 1000.0, "observed_mem_mib": None,
            "at": T0 + dt.timedelta(minutes=minute), "fed": True, "fed_note": ""}


@pytest.fixture
def state(tmp_path: Path) -> StateStore:
    svc = JobService.open(f"sqlite:///{tmp_path / 'state.db'}")
    svc.register({"id": "r50", "workload": "resnet50", "floor": 1})
    svc.register({"id": "bert", "workload": "bert", "floor": 1})
    svc.register({"id": "ncf", "workload": "ncf", "floor": 1})
    return svc.store


def _insert(state: StateStore, rows: list[dict]) -> None:
    state.write(lambda c: c.execute(sa.insert(Measurement), rows))


def test_a_window_with_solo_reports_on_both_sides_gives_one_runtime_row(state: StateStore) -> None:
    kr, kb = {"micro_batch": 64}, {"micro_batch": 32}
    _insert(state, [
        _report("r50", "resnet50", kr, 1000.0, False, 0), _report("r50", "resnet50", kr, 1010.0, False, 1),
        _report("bert", "bert", kb, 300.0, False, 0),
        _report("r50", "resnet50", kr, 500.0, True, 5), _report("bert", "bert", kb, 200.0, True, 5),
        _report("r50", "resnet50", kr, 520.0, True, 6), _report("bert", "bert", kb, 210.0, True, 6),
        _report("ncf", "ncf", {}, 5.0, True, 30),  # co-located with nobody reporting: no row
    ])  # fmt: skip
    out = collect_runtime_pairs(state)
    assert out.pairs == 1 and out.suspect == 0 and out.dataset is not None
    row = out.dataset.frame.row(0, named=True)
    sides = {row["job_a"]: "a", row["job_b"]: "b"}
    x = sides["r50"]
    assert row[f"solo_tput_{x}"] == pytest.approx(1005.0) and row[f"colo_tput_{x}"] == pytest.approx(510.0)
    assert row[f"repeats_{x}"] == 2 and row[f"slowdown_max_{x}"] == pytest.approx(1005.0 / 500.0)
    assert row["source"] == "runtime" and row["signature"] == SIG and row["gpu_mem_mib"] == 81920
    assert row["window_start"] < row["window_end"]
    assert out.skipped.get("no single partner reporting at the same time") == 1
    s = out.dataset.samples()
    assert len(s) == 2 and sorted(s.y.round(3).tolist()) == sorted([round(1005 / 510, 3), round(300 / 205, 3)])


def test_faster_together_than_alone_is_suspect_and_no_solo_means_no_row(state: StateStore) -> None:
    kr, kb = {"micro_batch": 64}, {"micro_batch": 32}
    _insert(state, [
        _report("r50", "resnet50", kr, 1000.0, False, 0), _report("bert", "bert", kb, 300.0, False, 0),
        _report("r50", "resnet50", kr, 1200.0, True, 5), _report("bert", "bert", kb, 250.0, True, 5),
    ])  # fmt: skip
    out = collect_runtime_pairs(state)
    assert out.pairs == 1 and out.suspect == 1
    assert len(out.dataset.samples()) == 0  # type: ignore[union-attr]


def test_without_a_solo_reference_the_window_is_skipped_with_its_reason(state: StateStore) -> None:
    kr, kb = {"micro_batch": 64}, {"micro_batch": 32}
    _insert(state, [_report("r50", "resnet50", kr, 500.0, True, 5), _report("bert", "bert", kb, 200.0, True, 5)])
    out = collect_runtime_pairs(state)
    assert out.dataset is None and out.skipped == {"no solo throughput on that signature": 1}
