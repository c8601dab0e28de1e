"""The status page's data stays bounded with a long history and shows the profile store's quarantine and the
workloads the interference model has not seen."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import polars as pl
import sqlalchemy as sa

from tests.airflow.conftest import REPO, TINY_CLUSTER


def test_recently_ended_is_newest_by_end_time_and_profile_problems_show(tmp_path: Path) -> None:
    from elastico_airflow.status.data import RECENT_FINISHED, status_snapshot
    from elastico_airflow.status.render import render_page
    from elastico_core.rst.store import ProfileStore
    from elastico_core.specs import parse_cluster
    from elastico_core.state import JobService, StateStore
    from elastico_core.state.controller import Controller, ControllerConfig
    from elastico_core.state.db import make_engine
    from elastico_core.state.models import Job

    url = f"sqlite:///{tmp_path / 'state.db'}"
    svc = JobService.open(url)
    svc.register_many([{"id": f"old{i:03d}", "workload": "bert"} for i in range(60)])
    engine = make_engine(url)
    with engine.begin() as conn:  # ended long ago, in registration order
        conn.execute(sa.update(Job).values(status="finished", finished_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)))
    engine.dispose()
    svc.register({"id": "fresh", "workload": "lstm", "floor": 1})
    profiles = tmp_path / "profiles"
    shutil.copytree(REPO / "profiles", profiles, ignore=shutil.ignore_patterns("colocation", "gpucheck"))
    bad = next(profiles.glob("a100-40gb_*.parquet"))
    df = pl.read_parquet(bad)
    df.with_columns(pl.when(pl.int_range(pl.len()) < 3).then(float("nan")).otherwise(pl.col("gpu_mem_mib"))
                    .alias("gpu_mem_mib")).write_parquet(bad)
    from tests.iac.test_planner_integration import cf_knowing

    ctl = Controller(StateStore.open(url), parse_cluster(TINY_CLUSTER, "c"), ProfileStore.open(profiles),
                     config=ControllerConfig(interval_s=0), predictor=cf_knowing(("bert", "resnet50"), 50.0))
    assert ctl.run_epoch().recorded
    ctl.close()
    svc.cancel("fresh", "cancelled seconds ago")  # registered last, ended last: first in "recently ended"
    data = status_snapshot(svc, backend="sqlite")
    svc.close()
    assert len(data["finished"]) == RECENT_FINISHED and data["finished"][0]["id"] == "fresh"
    assert any("3 rows quarantined" in n and bad.name in n for n in data["profile_problems"])
    page = render_page(data)
    assert 'id="profile-problems"' in page and "3 rows quarantined" in page
    assert len(data["iac_notes"]) == 1 and "lstm" in data["iac_notes"][0] and "cold-start assumption" in data["iac_notes"][0]
    assert 'id="iac-notes"' in page
