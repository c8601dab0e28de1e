"""``make ui`` runs the whole embedded Airflow (api-server, scheduler, dag-processor, triggerer), the controller
and the MLflow UI, and Ctrl-C stops every process it started. Run in a scratch root (links to dags/,
plugins/, profiles/) so the repository's own .airflow and .elastico stay untouched."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.airflow.conftest import REPO, free_port, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.airflow]


def _health(url: str) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def _ours(root: Path) -> list[psutil.Process]:
    """Processes started by this ``make ui`` (their AIRFLOW_HOME is the scratch root's)."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("AIRFLOW_HOME") == str(root / ".airflow"):
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def test_make_ui_runs_every_component_and_ctrl_c_stops_them(tmp_path: Path) -> None:
    from tests.airflow.test_ui_end_to_end import _mlflow_app_path

    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copytree(REPO / "scripts", root / "scripts", dirs_exist_ok=True)
    shutil.copytree(REPO / "profiles", root / "profiles")  # a copy: the controller may write measurements
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")  # the project's state setting
    for name in ("dags", "plugins"):
        (root / name).symlink_to(REPO / name)
    port, mlflow_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ELASTICO_", "MLFLOW_"))}
    extra = _mlflow_app_path(tmp_path)  # ElastiCo's MLflow app, where the checkout predates its entry point
    env.update(VENV=str(Path(sys.executable).parent.parent), ELASTICO_DEMO_PORT=str(port),
               ELASTICO_MLFLOW_PORT=str(mlflow_port),
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), extra, env.get("PYTHONPATH", "")) if p))
    log = (tmp_path / "ui.log").open("w")
    proc = subprocess.Popen(["bash", str(root / "scripts/ui.sh")], cwd=root, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def all_healthy() -> bool:
            h = _health(f"http://127.0.0.1:{port}/api/v2/monitor/health")
            assert proc.poll() is None, (tmp_path / "ui.log").read_text()[-3000:]
            return bool(h) and all(h[k]["status"] == "healthy"  # type: ignore[index]
                                   for k in ("metadatabase", "scheduler", "triggerer", "dag_processor"))

        wait_until(all_healthy, 240, "Airflow's scheduler, triggerer and dag-processor", interval=2.0)
        wait_until(lambda: _up(f"http://127.0.0.1:{mlflow_port}/health"), 120, "the MLflow UI", interval=2.0)
        wait_until(lambda: (root / ".elastico/ui-logs/controller.log").exists()
                   and "controller" in (root / ".elastico/ui-logs/controller.log").read_text(), 120, "the controller")
        wait_until(lambda: "Ctrl-C stops" in (tmp_path / "ui.log").read_text(), 120, "the ready banner")
        assert "State        .elastico/state.db" in (tmp_path / "ui.log").read_text()  # the project's state
        names = {" ".join(p.cmdline()) for p in _ours(root)}  # the api-server answered its health check above
        for wanted in ("scheduler", "dag-processor", "triggerer", "controller run", "mlflow server"):
            assert any(wanted in n for n in names), (wanted, names)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends to the foreground group
        proc.wait(timeout=60)
        log.close()
    wait_until(lambda: not _ours(root), 30, "every process of make ui to stop")
