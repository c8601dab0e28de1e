"""The load test of the whole Airflow path: N jobs through DAG -> operator -> state -> controller -> trigger -> launch.

``run_load`` starts a private, loopback-only deployment from this repository — Airflow's api-server,
scheduler, dag-processor and triggerer (LocalExecutor, or CeleryExecutor with a private ``redis-server`` and
N Celery workers), the ElastiCo controller on a generated cluster file, the local launcher — triggers the
``airflow_load`` DAG (``scripts/loadtest/dags``: N mapped ``ElasticoJobOperator`` tasks running the sleep
workload) and samples it every half second until every task has ended. It reads what happened from the
three places that know: Airflow's metadata database (task states: the worker slots in use, the deferred
tasks), the ElastiCo state (registration, admission, start and finish of every job; the controller's
epochs) and each job's progress file (how many times it started), plus the processes themselves (CPU and
memory from ``psutil``) and per-process SQL statement counts (``scripts/loadtest/sqlcount``, put on the
components' ``PYTHONPATH``).

It imports no Airflow: it drives the deployment as a user would, through processes, REST and SQL.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import psutil
import sqlalchemy as sa

from elastico_core.model.errors import ElasticoError

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "airflow_load"
TERMINAL_TI = frozenset({"success", "failed", "upstream_failed", "skipped", "removed"})


class Executor(StrEnum):
    LOCAL = "local"
    CELERY = "celery"


@dataclass(frozen=True, slots=True)
class LoadConfig:
    """One load test: how many jobs, how long each, on what deployment."""

    jobs: int = 30
    seconds: float = 60.0  # each job's run time
    steps: int = 6  # progress events per job
    gpus: int = 128
    per_gpu: int = 2  # max_jobs_per_gpu of the generated cluster
    workload: str = "ncf"  # what the planner sees (the process is the sleep workload)
    executor: Executor = Executor.LOCAL
    workers: int = 2  # Celery workers (separate processes)
    parallelism: int = 16  # Airflow's core.parallelism: the most worker slots
    interval_s: float = 2.0  # the controller's ΔT
    postgres_url: str | None = None  # a server to create fresh databases on; None: SQLite files
    out: Path = Path(".elastico/loadtest")
    timeout_s: float = 1800.0
    port: int = 0  # api-server port (0: a free one)
    chaos: bool = False  # SIGKILL the workers and restart the triggerer while the jobs run
    preload: bool = True  # LocalExecutor: the workers start with the operator imported (``elastico_airflow.executors``)

    def label(self) -> str:
        db = "postgres" if self.postgres_url else "sqlite"
        plain = "-no-preload" if self.executor is Executor.LOCAL and not self.preload else ""
        return f"{self.executor.value}{plain}-{db}-{self.jobs}"


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _round(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(x, nd)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_yaml(gpus: int, per_gpu: int) -> str:
    """``gpus`` A100-80GB in nodes of eight, ``per_gpu`` jobs per GPU."""
    nodes = max(1, math.ceil(gpus / 8))
    return (
        "cluster:\n  name: loadtest\n  m_sys_mib: 512\n"
        f"  max_jobs_per_gpu: {per_gpu}\n  nodes:\n"
        f"    - name: node\n      count: {nodes}\n      gpu: a100-80gb\n      gpus: {min(8, gpus)}\n"
        "      cpu_cores: 256\n      host_mem_gib: 2048\n"
    )


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]

    def tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.popen.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []


@dataclass
class Usage:
    """CPU seconds and peak memory of one component's process tree."""

    cpu_s: float = 0.0
    peak_rss_mib: float = 0.0
    _seen: dict[int, float] = field(default_factory=dict)

    def sample(self, procs: Sequence[psutil.Process]) -> None:
        rss = 0.0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                self._seen[p.pid] = t.user + t.system + t.children_user + t.children_system
                rss += p.memory_info().rss
        self.cpu_s = sum(self._seen.values())
        self.peak_rss_mib = max(self.peak_rss_mib, rss / 2**20)


class Deployment:
    """The processes of one load test, each in its own process group; ``stop`` ends them all."""

    def __init__(self, cfg: LoadConfig, home: Path, say: Callable[[str], None]) -> None:
        self.cfg, self.home, self.say = cfg, home, say
        self.logs = home / "logs"
        self.procs: list[Proc] = []
        self.port = cfg.port or _free_port()
        self.env: dict[str, str] = {}

    def start(self, name: str, cmd: list[str]) -> Proc:
        out = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - the child holds it
        try:
            popen = subprocess.Popen(cmd, env=self.env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        finally:
            out.close()
        proc = Proc(name, popen)
        self.procs.append(proc)
        return proc

    def kill(self, proc: Proc, sig: int = signal.SIGTERM, wait_s: float = 20.0) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, sig)
        try:
            proc.popen.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.popen.pid, signal.SIGKILL)  # anything the leader left behind

    def stop(self) -> None:
        for proc in reversed(self.procs):
            self.kill(proc)
        self.procs.clear()
        for record in (self.home / "runs").glob("*/process.json"):  # workloads run in sessions of their own
            with contextlib.suppress(OSError, ValueError, KeyError, ProcessLookupError, PermissionError):
                os.killpg(int(json.loads(record.read_text())["pid"]), signal.SIGTERM)


def _executor_path(cfg: LoadConfig) -> str:
    if cfg.executor is Executor.CELERY:
        return "CeleryExecutor"
    return "elastico_airflow.executors.PreloadedLocalExecutor" if cfg.preload else "LocalExecutor"


class DeploymentFailed(ElasticoError):
    """The load test's own deployment did not start (a missing driver, a port, a database): not the input's fault."""

    exit_code = 1


def _last_line(text: str) -> str:
    """The last non-blank line of a command's output: the exception of a Python traceback."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def _db_urls(cfg: LoadConfig, home: Path) -> tuple[str, str]:
    """(Airflow metadata URL, ElastiCo state URL): fresh SQLite files, or fresh databases on the server."""
    if not cfg.postgres_url:
        return f"sqlite:///{home / 'airflow.db'}", f"sqlite:///{home / 'state.db'}"
    base = sa.make_url(cfg.postgres_url)
    stamp = f"{int(time.time())}_{os.getpid()}"
    names = (f"load_airflow_{stamp}", f"load_state_{stamp}")
    engine = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        for name in names:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return (
        base.set(database=names[0]).render_as_string(hide_password=False),
        base.set(database=names[1]).render_as_string(hide_password=False),
    )


def _http(url: str, *, method: str = "GET", body: Any = None, token: str = "", timeout: float = 30) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    req.add_header("Accept", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def _wait(what: str, check: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            got = check()
            if got:
                return got
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}" + (f" ({last})" if last else ""))


def _airflow_env(
    cfg: LoadConfig, home: Path, airflow_url: str, state_url: str, port: int, redis_port: int
) -> dict[str, str]:
    workdir = home / "runs"
    conn = {"conn_type": "elastico", "extra": {"state_url": state_url, "launcher": "local", "workdir": str(workdir)}}
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "ELASTICO_"))},
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join([str(REPO / "scripts" / "loadtest" / "sqlcount"), str(REPO)]),
        "ELASTICO_SQLCOUNT_DIR": str(home / "sqlcount"),
        "AIRFLOW_HOME": str(home / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "scripts" / "loadtest" / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": _executor_path(cfg),
        "AIRFLOW__CORE__PARALLELISM": str(cfg.parallelism),
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "1024",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": airflow_url,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(48).hex(),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        # every task run parses the DAG file (Airflow, KPO, the kubernetes clients): many at once on a small
        # machine exceed the 30-s default, and Airflow then reschedules the task a minute later
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "300",
        "AIRFLOW__TRIGGERER__CAPACITY": str(max(1000, 2 * cfg.jobs)),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # a task whose process died is failed (and retried) after a minute without a heartbeat, not five
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
        "AIRFLOW_CONN_ELASTICO_DEFAULT": json.dumps(conn),
    }
    if cfg.executor is Executor.CELERY:
        result = airflow_url.replace("postgresql+psycopg2://", "db+postgresql+psycopg2://")  # SQLAlchemy 2.1 defaults to psycopg 3
        env.update(
            {
                "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
                "AIRFLOW__CELERY__RESULT_BACKEND": result,
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(max(1, cfg.parallelism // max(1, cfg.workers))),
            }
        )
    return env


@dataclass
class Samples:
    """What the sampler saw over time."""

    t0: float
    max_running: int = 0
    max_deferred: int = 0
    max_queued: int = 0
    series: list[dict[str, Any]] = field(default_factory=list)


def _ti_counts(engine: sa.Engine) -> dict[str, int]:
    sql = sa.text("SELECT state, COUNT(*) FROM task_instance WHERE dag_id = :d AND task_id = 'job' GROUP BY state")
    with engine.connect() as conn:
        return {str(s): int(n) for s, n in conn.execute(sql, {"d": DAG_ID})}


def _sql_counts(folder: Path) -> dict[str, dict[str, int]]:
    """Statements per database, per component (by the process's command line)."""
    out: dict[str, dict[str, int]] = {}
    for f in folder.glob("*.json"):
        with contextlib.suppress(OSError, json.JSONDecodeError):
            raw = json.loads(f.read_text())
            who = _component(str(raw.get("argv", "")))
            for db, n in raw.get("counts", {}).items():
                out.setdefault(who, {}).setdefault(db, 0)
                out[who][db] += int(n)
    return out


def _component(argv: str) -> str:
    for name in ("scheduler", "triggerer", "dag-processor", "api-server", "celery", "controller"):
        if name in argv:
            return name
    return "task" if "task" in argv or "supervisor" in argv else (argv.split(" ")[-1] or "other")


def run_load(cfg: LoadConfig, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run one load test (see the module docstring); returns its figures (also written to ``out/<label>.json``)."""
    home = (cfg.out / f"{cfg.label()}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}").absolute()
    for sub in ("logs", "sqlcount", "airflow", "runs"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    airflow_url, state_url = _db_urls(cfg, home)
    dep = Deployment(cfg, home, say)
    redis_port = _free_port()
    dep.env = _airflow_env(cfg, home, airflow_url, state_url, dep.port, redis_port)
    cluster = home / "cluster.yaml"
    cluster.write_text(cluster_yaml(cfg.gpus, cfg.per_gpu))
    profiles = home / "profiles"
    shutil.copytree(REPO / "profiles", profiles)
    bin_dir = Path(sys.executable).parent
    airflow = str(bin_dir / "airflow")
    t_setup = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _interrupted)  # a SIGTERM still stops what it started
    try:
        say(f"[{cfg.label()}] airflow db migrate ({'PostgreSQL' if cfg.postgres_url else 'SQLite'})")
        done = subprocess.run(
            [airflow, "db", "migrate"], env=dep.env, cwd=REPO, capture_output=True, text=True, timeout=600
        )
        if done.returncode != 0:
            log = dep.logs / "db-migrate.log"
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it may quote a database URL
            with os.fdopen(fd, "w") as f:
                f.write(done.stdout + done.stderr)
            raise DeploymentFailed(f"airflow db migrate failed: {_last_line(done.stderr)} (whole output: {log})")
        dep.start("controller", [str(bin_dir / "elastico"), "controller", "run", "--interval", str(cfg.interval_s),
                                 "--cluster", str(cluster), "--state", state_url, "--profiles", str(profiles),
                                 # named: ``auto`` would load whatever champion the checkout's MLflow store holds
                                 "--predictor", "table"])  # fmt: skip
        if cfg.executor is Executor.CELERY:
            dep.start("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no"])  # fmt: skip
            for i in range(cfg.workers):
                dep.start(f"celery-{i}", [airflow, "celery", "worker", "--skip-serve-logs", "-H", f"w{i}@%h"])
        dep.start("api-server", [airflow, "api-server", "--host", "127.0.0.1", "--port", str(dep.port), "-w", "1"])
        dep.start("scheduler", [airflow, "scheduler", "--skip-serve-logs"])
        dep.start("dag-processor", [airflow, "dag-processor"])
        triggerer = dep.start("triggerer", [airflow, "triggerer", "--skip-serve-logs"])
        base = f"http://127.0.0.1:{dep.port}"
        _wait("the api-server", lambda: _http(f"{base}/api/v2/monitor/health"), 180)
        token = _http(f"{base}/auth/token")["access_token"]
        _wait(f"the DAG {DAG_ID}", lambda: _http(f"{base}/api/v2/dags/{DAG_ID}", token=token), 180, every=2)
        setup_s = time.monotonic() - t_setup
        say(f"[{cfg.label()}] up in {setup_s:.0f} s; triggering {cfg.jobs} jobs of {cfg.seconds:g} s")
        conf = {"jobs": cfg.jobs, "seconds": cfg.seconds, "steps": cfg.steps, "workload": cfg.workload}
        run = _http(f"{base}/api/v2/dags/{DAG_ID}/dagRuns", method="POST", token=token,
                    body={"logical_date": None, "conf": conf, "dag_run_id": "load"})  # fmt: skip
        samples = _sample(cfg, dep, sa.create_engine(airflow_url), triggerer, say)
        run = _http(f"{base}/api/v2/dags/{DAG_ID}/dagRuns/load", token=token)
        result = _collect(cfg, home, airflow_url, state_url, samples, dep, setup_s)
        result["dag_run_state"] = run.get("state")
    finally:
        dep.stop()
        signal.signal(signal.SIGTERM, previous)
    (cfg.out / f"{cfg.label()}.json").write_text(json.dumps(result, indent=2, default=str))
    (home / "result.json").write_text(json.dumps(result, indent=2, default=str))
    return result


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _sample(
    cfg: LoadConfig, dep: Deployment, engine: sa.Engine, triggerer: Proc, say: Callable[[str], None]
) -> Samples:
    samples = Samples(time.monotonic())
    usage = {
        name: Usage() for name in ("triggerer", "controller", "scheduler", "workers", "api-server", "dag-processor")
    }
    deadline = samples.t0 + cfg.timeout_s
    chaos_done = False
    last_print = 0.0
    while time.monotonic() < deadline:
        try:
            counts = _ti_counts(engine)
        except Exception:  # the metadata DB is busy (SQLite): next time
            time.sleep(0.5)
            continue
        now = time.monotonic() - samples.t0
        running, deferred = counts.get("running", 0), counts.get("deferred", 0)
        samples.max_running = max(samples.max_running, running)
        samples.max_deferred = max(samples.max_deferred, deferred)
        samples.max_queued = max(samples.max_queued, counts.get("queued", 0) + counts.get("scheduled", 0))
        samples.series.append({"t": round(now, 1), **counts})
        for proc in dep.procs:
            name = "workers" if proc.name.startswith("celery") else proc.name
            if name in usage:
                usage[name].sample(proc.tree())
        if cfg.executor is Executor.LOCAL:  # LocalExecutor's workers are the scheduler's children
            usage["workers"] = usage["scheduler"]
        ended = sum(n for s, n in counts.items() if s in TERMINAL_TI)
        if now - last_print >= 15:
            last_print = now
            say(f"  t={now:5.0f}s running={running} deferred={deferred} ended={ended}/{cfg.jobs} "
                f"(states {dict(sorted(counts.items()))})")  # fmt: skip
        if cfg.chaos and not chaos_done and deferred >= max(1, cfg.jobs // 2):
            chaos_done = True
            _chaos(dep, triggerer, say)
        if sum(counts.values()) >= cfg.jobs and ended >= cfg.jobs:
            break
        time.sleep(0.5)
    samples.series.append(
        {"usage": {k: {"cpu_s": round(u.cpu_s, 1), "peak_rss_mib": round(u.peak_rss_mib)} for k, u in usage.items()}}
    )
    return samples


def _chaos(dep: Deployment, triggerer: Proc, say: Callable[[str], None]) -> None:
    """SIGKILL every worker and the triggerer while jobs run, then start them again.

    Celery's workers are processes of their own. The LocalExecutor's live inside the scheduler (children
    sharing its queues: a worker killed alone can die holding the queue's lock and leave every later task
    queued for ever), so its "worker host" crash is the scheduler with all of Airflow's processes under it.
    The workloads the local launcher started run in sessions of their own and outlive the crash, as pods
    outlive a dead Airflow worker."""
    airflow = str(Path(sys.executable).parent / "airflow")
    victims = [p for p in dep.procs if p.name.startswith("celery")]
    if not victims:
        sched = next(p for p in dep.procs if p.name == "scheduler")
        session = os.getsid(sched.popen.pid)
        for child in sched.tree()[1:]:
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if os.getsid(child.pid) == session:  # Airflow's (workers, task processes), not the workloads
                    child.kill()
        victims = [sched]
    for proc in [*victims, triggerer]:
        dep.kill(proc, signal.SIGKILL)
        dep.procs.remove(proc)
    say(f"  chaos: SIGKILLed {', '.join(p.name for p in [*victims, triggerer])} (the LocalExecutor's workers with "
        "the scheduler); starting them again")
    for proc in victims:
        if proc.name == "scheduler":
            dep.start("scheduler", [airflow, "scheduler", "--skip-serve-logs"])
        else:
            dep.start(proc.name, [airflow, "celery", "worker", "--skip-serve-logs", "-H", f"{proc.name}@%h"])
    dep.start("triggerer", [airflow, "triggerer", "--skip-serve-logs"])


def _collect(
    cfg: LoadConfig, home: Path, airflow_url: str, state_url: str, samples: Samples, dep: Deployment, setup_s: float
) -> dict[str, Any]:
    wall_s = time.monotonic() - samples.t0
    af = sa.create_engine(airflow_url)
    with af.connect() as conn:
        ti_states = {str(s): int(n) for s, n in conn.execute(sa.text(
            "SELECT state, COUNT(*) FROM task_instance WHERE dag_id = :d AND task_id = 'job' GROUP BY state"), {"d": DAG_ID})}  # fmt: skip
        tries = [int(n) for (n,) in conn.execute(sa.text(
            "SELECT try_number FROM task_instance WHERE dag_id = :d AND task_id = 'job'"), {"d": DAG_ID})]  # fmt: skip
    st = sa.create_engine(state_url)
    with st.connect() as conn:
        jobs = [dict(r._mapping) for r in conn.execute(sa.text(
            "SELECT id, status, created_at, admitted_at, started_at, finished_at, attempts FROM elastico_jobs WHERE dag_id = :d"),
            {"d": DAG_ID})]  # fmt: skip
        epochs = [dict(r._mapping) for r in conn.execute(sa.text(
            "SELECT epoch, started_at, recorded_at, jobs_planned, admitted, plan_ms FROM elastico_epochs ORDER BY epoch"))]  # fmt: skip
    af.dispose()
    st.dispose()

    def ts(v: Any) -> float | None:
        if v is None:
            return None
        if isinstance(v, str):
            v = dt.datetime.fromisoformat(v)
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.UTC)
        return float(v.timestamp())

    reg = {j["id"]: ts(j["created_at"]) for j in jobs}
    adm = {j["id"]: ts(j["admitted_at"]) for j in jobs}
    sta = {j["id"]: ts(j["started_at"]) for j in jobs}
    fin = {j["id"]: ts(j["finished_at"]) for j in jobs}
    capacity = cfg.gpus * cfg.per_gpu
    admit_lat, admit_free, start_lat, total_lat = [], [], [], []
    for jid, r in reg.items():
        a, s = adm.get(jid), sta.get(jid)
        if r is not None and a is not None:
            admit_lat.append(a - r)
            live = sum(1 for k in reg if (adm[k] or math.inf) <= r < (fin[k] or math.inf) and k != jid)
            if live < capacity:
                admit_free.append(a - r)
        if a is not None and s is not None:
            start_lat.append(s - a)
        if r is not None and s is not None:
            total_lat.append(s - r)
    finished = sorted(f for f in fin.values() if f is not None)
    per_min = (
        (len(finished) - 1) / (finished[-1] - finished[0]) * 60
        if len(finished) > 1 and finished[-1] > finished[0]
        else None
    )
    durations = [(ts(e["recorded_at"]) or 0) - (ts(e["started_at"]) or 0) for e in epochs]
    planned = [int(e["jobs_planned"]) for e in epochs]
    peak = max(planned, default=0)
    at_peak = [d for d, n in zip(durations, planned, strict=True) if n >= 0.9 * peak and peak > 0]
    starts, dup = _starts(home / "runs")
    sql = _sql_counts(home / "sqlcount")
    state_db = Path(sa.make_url(state_url).database or "").name
    airflow_db = Path(sa.make_url(airflow_url).database or "").name
    usage = samples.series[-1].get("usage", {}) if samples.series else {}
    trig_state = sql.get("triggerer", {}).get(state_db, 0)
    trig_reads = sql.get("triggerer", {}).get(state_db + "#select")  # None: counted by an older sitecustomize
    avg_deferred = _mean([float(s.get("deferred", 0)) for s in samples.series if "t" in s])
    return {
        "config": {
            k: (str(v) if isinstance(v, (Path, StrEnum)) else v) for k, v in asdict(cfg).items() if k != "postgres_url"
        },
        "database": "postgresql" if cfg.postgres_url else "sqlite",
        "setup_s": round(setup_s, 1),
        "wall_s": round(wall_s, 1),
        "tasks": {"states": ti_states, "retried": sum(1 for t in tries if t > 1)},
        "jobs": {
            "registered": len(jobs),
            "states": _count(j["status"] for j in jobs),
            "lost": cfg.jobs - sum(1 for j in jobs if j["status"] == "finished"),
            "duplicated": dup,
            "launches": starts,
            "stuck": sum(1 for j in jobs if j["status"] in ("pending", "admitted", "running", "switching")),
        },
        "latency_s": {
            "registration_to_admission": _pcts(admit_lat),
            "registration_to_admission_capacity_free": _pcts(admit_free),
            "admission_to_start": _pcts(start_lat),
            "registration_to_start": _pcts(total_lat),
            "admission_p99_in_epochs_capacity_free": _round((percentile(admit_free, 99) or 0) / cfg.interval_s),
        },
        "finished_per_min": _round(per_min, 1),
        "worker_slots": {
            "max_running": samples.max_running,
            "parallelism": cfg.parallelism,
            "max_deferred": samples.max_deferred,
            "max_queued": samples.max_queued,
        },
        "usage": usage,
        "controller_epochs": {
            "count": len(epochs),
            "duration_s": _pcts(durations),
            "peak_jobs_planned": peak,
            "duration_at_peak_s": _pcts(at_peak),
        },
        "sql_statements_per_s": {
            who: {
                ("state" if db == state_db else "airflow" if db == airflow_db else db): round(n / wall_s, 1)
                for db, n in dbs.items()
                if "#" not in db
            }
            for who, dbs in sorted(sql.items())
        },
        "trigger_poll": {
            "triggerer_state_statements_per_s": round(trig_state / wall_s, 2),
            # the polls are the reads; the writes are the progress and outcomes the launch triggers record
            "triggerer_state_selects_per_s": None if trig_reads is None else round(trig_reads / wall_s, 2),
            "mean_deferred": _round(avg_deferred, 1),
            "per_1000_deferred": _round(trig_state / wall_s / avg_deferred * 1000 if avg_deferred else None),
            "selects_per_1000_deferred": _round(trig_reads / wall_s / avg_deferred * 1000 if avg_deferred and trig_reads is not None else None),
        },
        "series": samples.series[:-1][:: max(1, len(samples.series) // 400)],
    }


def _starts(runs: Path) -> tuple[int, int]:
    """(launches, jobs started twice): a start that follows another start with no checkpoint or stop between."""
    launches = dup = 0
    for progress in runs.glob("*/progress.jsonl"):
        last = None
        twice = False
        for line in progress.read_text(errors="replace").splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                ev = json.loads(line).get("event")
                if ev == "start":
                    launches += 1
                    twice = twice or last == "start-open"
                    last = "start-open"
                elif ev in ("checkpointed", "stopped", "done", "error", "oom"):
                    last = ev
        dup += twice
    return launches, dup


def _pcts(values: Sequence[float]) -> dict[str, float | None]:
    return {"n": len(values), "p50": _round(percentile(values, 50)), "p99": _round(percentile(values, 99)),  # type: ignore[dict-item]
            "max": _round(max(values) if values else None)}  # fmt: skip


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _count(items: Iterator[Any] | Sequence[Any] | Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[str(x)] = out.get(str(x), 0) + 1
    return out


def summary_lines(result: Mapping[str, Any]) -> list[str]:
    """A short human summary of ``run_load``'s figures."""
    lat, j, w, ep = result["latency_s"], result["jobs"], result["worker_slots"], result["controller_epochs"]
    use = result.get("usage", {})
    return [
        f"{result['config']['executor']} executor, {result['database']}, {result['config']['jobs']} jobs of "
        f"{result['config']['seconds']:g} s: wall {result['wall_s']} s (set-up {result['setup_s']} s)",
        f"tasks {result['tasks']['states']} (retried {result['tasks']['retried']}); jobs {j['states']}; "
        f"lost {j['lost']}, duplicated {j['duplicated']}, stuck {j['stuck']}",
        f"registration->admission p50/p99 {lat['registration_to_admission']['p50']}/{lat['registration_to_admission']['p99']} s "
        f"(capacity free: p99 {lat['registration_to_admission_capacity_free']['p99']} s = "
        f"{lat['admission_p99_in_epochs_capacity_free']} epochs); admission->start p50/p99 "
        f"{lat['admission_to_start']['p50']}/{lat['admission_to_start']['p99']} s",
        f"finished/min {result['finished_per_min']}; worker slots max {w['max_running']} of {w['parallelism']}, "
        f"deferred max {w['max_deferred']}",
        f"controller epochs {ep['count']}: p50/p99 {ep['duration_s']['p50']}/{ep['duration_s']['p99']} s; at peak "
        f"({ep['peak_jobs_planned']} jobs) p50/p99 {ep['duration_at_peak_s']['p50']}/{ep['duration_at_peak_s']['p99']} s",
        "cpu s / peak MiB: " + ", ".join(f"{k} {v['cpu_s']}/{v['peak_rss_mib']}" for k, v in use.items()),
        f"state statements/s by the triggerer {result['trigger_poll']['triggerer_state_statements_per_s']} "
        f"({result['trigger_poll']['per_1000_deferred']} per 1,000 deferred; reads "
        f"{result['trigger_poll'].get('selects_per_1000_deferred')} per 1,000 deferred)",
    ]
