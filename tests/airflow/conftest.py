"""Fixtures of the Airflow tests: a private AIRFLOW_HOME, the plugins on sys.path, a controller, fake contexts.

Airflow reads its configuration when first imported, so the environment is set here, at import time,
before any test module imports it. Everything is written under a temporary folder (AIRFLOW_HOME, the
planner state, run folders, MLflow stores); every process a fixture starts runs in its own process
group and is killed with it at teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"
DAGS = REPO / "dags"
VENV_BIN = Path(sys.executable).parent
# one temporary folder per test session; processes a test starts (which import this module) reuse it
_OWNER = "ELASTICO_TEST_SESSION_TMP" not in os.environ
SESSION_TMP = Path(os.environ.get("ELASTICO_TEST_SESSION_TMP") or tempfile.mkdtemp(prefix="elastico-airflow-tests-"))
os.environ["ELASTICO_TEST_SESSION_TMP"] = str(SESSION_TMP)
AIRFLOW_HOME = SESSION_TMP / "airflow-home"
JWT_SECRET = "t" * 64

AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
    "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    "AIRFLOW__CORE__PARALLELISM": "2",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    "AIRFLOW__API_AUTH__JWT_SECRET": JWT_SECRET,
    "AIRFLOW__API__HOST": "127.0.0.1",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
}
os.environ.update(AIRFLOW_ENV)
if str(PLUGINS) not in sys.path:
    sys.path.insert(0, str(PLUGINS))

try:
    import airflow  # noqa: F401  (configured by the environment above)
except ImportError:  # pragma: no cover - the airflow extra is not installed
    collect_ignore_glob = ["test_*.py"]

TINY_CLUSTER = """\
cluster:
  name: test
  m_sys_mib: 512
  max_jobs_per_gpu: 2
  nodes:
    - name: gpu-node
      count: 1
      gpu: a100-40gb
      gpus: 2
      cpu_cores: 16
      host_mem_gib: 64
"""


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _OWNER:
        shutil.rmtree(SESSION_TMP, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kill_group(proc: subprocess.Popen[Any], grace_s: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace_s``; always reaps the leader."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def start_group(cmd: list[str], log: Path, env: dict[str, str], cwd: Path = REPO) -> subprocess.Popen[bytes]:
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    try:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    finally:
        out.close()


def bin_path(name: str) -> str:
    return str(VENV_BIN / name)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite metadata database in the session's AIRFLOW_HOME (6-10 s once)."""
    AIRFLOW_HOME.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [bin_path("airflow"), "db", "migrate"], env={**os.environ}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return AIRFLOW_HOME / "airflow.db"


@pytest.fixture(scope="session")
def lm_model(tiny_model: Path) -> Path:
    """The model vLLM serves in the inference tasks: the session's tiny local model."""
    return tiny_model


@pytest.fixture
def cluster_file(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(TINY_CLUSTER)
    return path


@pytest.fixture
def profiles_copy(tmp_path: Path) -> Path:
    out = tmp_path / "profiles"
    shutil.copytree(REPO / "profiles", out)
    return out


@dataclass
class Env:
    """One test's ElastiCo setup: state, run folder, connection JSON (for ``AIRFLOW_CONN_ELASTICO_DEFAULT``)."""

    root: Path
    state_url: str
    workdir: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def connection(self, **extra: Any) -> str:
        return json.dumps({"conn_type": "elastico", "extra": {**self.extra, **extra}})

    def process_env(self, **extra: Any) -> dict[str, str]:
        return {
            **os.environ,
            "AIRFLOW_CONN_ELASTICO_DEFAULT": self.connection(**extra),
            "ELASTICO_STATE_URL": self.state_url,
        }


@pytest.fixture
def elastico_env(tmp_path: Path, lm_model: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    """State and run folder under tmp_path; the connection also set in this process's environment."""
    state_url = f"sqlite:///{tmp_path / 'state.db'}"
    env = Env(
        tmp_path,
        state_url,
        tmp_path / "runs",
        {
            "state_url": state_url,
            "workdir": str(tmp_path / "runs"),
            "launcher": "local",
            "workload_env": {"ELASTICO_SCALE": "tiny", "ELASTICO_TORCH_THREADS": "1", "ELASTICO_MODEL": str(lm_model)},
            "report_cpu_throughput": True,
        },
    )
    monkeypatch.setenv("AIRFLOW_CONN_ELASTICO_DEFAULT", env.connection())
    monkeypatch.setenv("ELASTICO_STATE_URL", state_url)
    return env


@contextlib.contextmanager
def controller(state_url: str, cluster: Path, profiles: Path, log: Path, interval: float = 0.5) -> Iterator[None]:
    """``elastico controller run`` in the background for the duration of the block."""
    proc = start_group(
        [
            bin_path("elastico"),
            "controller",
            "run",
            "--interval",
            str(interval),
            "--cluster",
            str(cluster),
            "--state",
            state_url,
            "--profiles",
            str(profiles),
        ],
        log,
        {**os.environ},
    )
    try:
        yield
    finally:
        kill_group(proc)


def run_epochs(state_url: str, cluster: Path, profiles: Path, n: int = 1) -> None:
    """Planning epochs in this process (deterministic tests: no background controller)."""
    from elastico_core.rst.store import ProfileStore
    from elastico_core.specs import parse_cluster
    from elastico_core.state import StateStore
    from elastico_core.state.controller import Controller, ControllerConfig

    text = cluster.read_text()
    store = StateStore.open(state_url)
    try:
        ctl = Controller(
            store,
            parse_cluster(text, str(cluster)),
            ProfileStore.open(profiles),
            config=ControllerConfig(interval_s=0, feedback_interval_s=0),
            cluster_yaml=text,
        )
        for _ in range(n):
            ctl.run_epoch()
        ctl.close()
    finally:
        store.close()


@dataclass
class FakeTI:
    """The parts of a task instance the operator reads (identity, try number) and XCom pushes it makes."""

    dag_id: str = "test_dag"
    task_id: str = "job"
    run_id: str = "run-1"
    map_index: int = -1
    try_number: int = 1
    xcoms: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


def fake_context(ti: FakeTI) -> dict[str, Any]:
    class _Dag:
        dag_id = ti.dag_id
        parent_dag = None

    return {"ti": ti, "run_id": ti.run_id, "dag": _Dag(), "task_instance": ti}


def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def first_event(trigger: Any) -> Any:
    """The first event a trigger fires, run to it in a fresh event loop (as the triggerer would)."""
    import asyncio

    async def go() -> Any:
        async for event in trigger.run():
            return event
        return None

    return asyncio.run(go())


def run_deferred(op: Any, ctx: dict[str, Any], call: Any, *, on_defer: Any = None, hops: int = 20) -> Any:
    """Run a task as Airflow does across deferrals: each trigger to its first event, then the resume method.

    ``call`` starts it (``lambda: op.execute(ctx)``); ``on_defer(deferral)`` runs before each trigger (say,
    a planning epoch). Returns the task's result; the deferrals it went through are in ``op.deferrals``.
    """
    from airflow.sdk.exceptions import TaskDeferred

    op.deferrals = []
    for _ in range(hops):
        try:
            return call()
        except TaskDeferred as deferral:
            op.deferrals.append(deferral)
            if on_defer is not None:
                on_defer(deferral)
            if hasattr(deferral.trigger, "min_wait_s"):
                deferral.trigger.min_wait_s = 0
            event = first_event(deferral.trigger)
            method = getattr(op, deferral.method_name)
            kwargs = dict(deferral.kwargs or {})
            call = lambda m=method, e=event, k=kwargs: m(ctx, event=e.payload, **k)  # noqa: E731
    raise AssertionError(f"still deferring after {hops} hops")
