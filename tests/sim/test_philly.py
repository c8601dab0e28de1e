"""The Philly importer: window, sampling, capping, and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastico_core.model.errors import SpecError
from elastico_core.model.workload import JobKind
from elastico_core.sim.philly import import_philly
from tests.sim.sim_helpers import need_data, write_csv

HEADER = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")


def tiny(tmp_path: Path) -> Path:
    rows = [
        ("2017-10-01 00:00:00", 100.0, 1, 100.0, "vc1"),
        ("2017-10-01 01:00:00", 200.0, 16, 3200.0, "vc2"),
        ("2017-10-01 02:30:00", 300.0, 3, 900.0, "vc1"),
        ("2017-10-02 05:00:00", 400.0, 1, 400.0, "vc1"),
    ]
    return write_csv(tmp_path / "philly.csv", HEADER, rows)


def test_window_mapping_and_caps(tmp_path: Path) -> None:
    tr = import_philly(tiny(tmp_path), start_h=0.5, hours=3)
    assert [(j.job_id, j.submit_time_s, j.num_gpus, j.user) for j in tr.jobs] == [
        ("philly-000001", 1800.0, 8, "vc2"),
        ("philly-000002", 7200.0, 3, "vc1"),
    ]
    assert all(j.kind is JobKind.TRAIN and j.mapped for j in tr.jobs)
    assert len(import_philly(tiny(tmp_path), start_h=0, hours=48, vc="vc1")) == 3
    assert len(import_philly(tiny(tmp_path), start_h=0, hours=48, sample=0.5, seed=1)) < 4


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="missing columns"):
        import_philly(write_csv(tmp_path / "x.csv", ("a", "b"), [(1, 2)]))
    with pytest.raises(SpecError, match="cannot read"):
        import_philly(tmp_path / "none.csv")
    with pytest.raises(SpecError, match="line 2"):
        import_philly(write_csv(tmp_path / "y.csv", HEADER, [("yesterday", 1, 1, 1, "v")]))


def test_the_real_trace_imports() -> None:
    path = need_data("philly-pollux", "philly.csv")
    tr = import_philly(path, hours=24, sample=0.1, seed=0)
    assert 150 < len(tr) < 600
    assert max(j.submit_time_s for j in tr.jobs) < 24 * 3600
    assert max(j.num_gpus for j in tr.jobs) <= 8
