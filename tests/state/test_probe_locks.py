"""A controller running beside its MLflow follower keeps seeing the state other processes write.

The follower (like every reader) probes the state before it opens it. A plain ``open()``/``close()`` of
the database file in the controller's process would drop every POSIX lock the process holds on it, its
SQLite connections' included; after that the controller read a stale snapshot for good ("0 pending in
all", idle while a requeued job and a new one waited: seen in a ``make ui`` run). ``probe`` lets only
SQLite open the file; this test runs the controller as a user does and checks it admits what others add.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytest.importorskip("mlflow")


def _cli(cwd: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "elastico_core.cli", *args], capture_output=True, text=True,
                          timeout=180, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _status(url: str, job_id: str) -> str:
    from elastico_core.state import JobService

    svc = JobService.open(url)
    try:
        return svc.get(job_id).status.value
    finally:
        svc.close()


def _wait(url: str, job_id: str, status: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while _status(url, job_id) != status:
        assert time.monotonic() < deadline, f"{job_id} never became {status}"
        time.sleep(0.5)


@pytest.mark.slow
def test_the_controller_beside_its_follower_admits_what_other_processes_add(tmp_path: Path) -> None:
    from elastico_core.state import JobService

    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    url = f"sqlite:///{tmp_path / 'state.db'}"
    (tmp_path / "a.yaml").write_text("jobs:\n  - {id: a, workload: lstm, floor: 1}\n")
    (tmp_path / "b.yaml").write_text("jobs:\n  - {id: b, workload: ncf, floor: 1}\n")
    _cli(tmp_path, "jobs", "submit", "--spec", "a.yaml", "--state", url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELASTICO_", "MLFLOW_"))}
    log = open(tmp_path / "controller.log", "wb")  # noqa: SIM115 - closed below
    ctl = subprocess.Popen(
        [sys.executable, "-m", "elastico_core.cli", "controller", "run", "--interval", "0.5", "--state", url,
         "--cluster", str(REPO / "scripts/demo/cluster.yaml"), "--profiles", str(tmp_path / "profiles"),
         "--predictor", "table", "--mlflow", f"sqlite:///{tmp_path / 'mlflow.db'}"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait(url, "a", "admitted")
        svc = JobService.open(url)  # a launcher: the task was killed, its retry requeues the job
        job = svc.get("a")
        svc.report_started("a", job.token)
        svc.report_failed("a", job.token, "the Airflow task was killed")
        svc.requeue("a", "requeued by Airflow try 2")
        svc.close()
        _cli(tmp_path, "jobs", "submit", "--spec", "b.yaml", "--state", url)
        _wait(url, "a", "admitted")
        _wait(url, "b", "admitted")
    finally:
        ctl.terminate()
        ctl.wait(timeout=60)
        log.close()
    assert b"Traceback" not in (tmp_path / "controller.log").read_bytes()
