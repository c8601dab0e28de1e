"""The local launcher: an admitted plan's workload as a process on the worker's machine (the embedded default).

The process gets exactly the ``LaunchSpec`` environment (plus the few variables an interpreter needs to
start: ``PATH``, ``HOME``, locale, ``VIRTUAL_ENV``/``PYTHONPATH``) — never the worker's own environment,
which holds Airflow's secrets. It runs in its own session under a small wrapper that forwards SIGTERM and
records the exit code (``logs/launch-NNN.exit``), so it outlives the task that started it — the task
defers while it runs, as it does for a pod — and whoever reads its outcome later knows how it ended.
``process.json`` in the job's run folder records the launch (pid, start time, token, log); ``start`` finds
a running or finished launch of the same token there instead of starting the job twice.

The run folder must be on a file system that the workers and the triggerer share (one machine, or a
shared volume); the pid is only meaningful on the machine that started it, so several worker machines
need the Kubernetes launcher.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from elastico_airflow.launch import Ended, LaunchRef, Probe
from elastico_airflow.launchspec import LaunchSpec
from elastico_airflow.settings import Launcher
from elastico_airflow.supervise import read_events, summarize

PASS_THROUGH_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TZ",
)
RECORD = "process.json"
FINAL_EVENTS = ("done", "error", "oom")  # a launch that wrote one of these is over for its token

# python -c WRAPPER <exit file> <module> <args...>: the workload as a child; SIGTERM forwarded; the exit
# code written atomically where a later reader (another worker, a restarted triggerer) finds it.
WRAPPER = """\
import json, os, signal, subprocess, sys
out = sys.argv[1]
child = subprocess.Popen([sys.executable, "-m", *sys.argv[2:]])
signal.signal(signal.SIGTERM, lambda s, f: child.send_signal(signal.SIGTERM))
code = child.wait()
with open(out + ".tmp", "w") as fh:
    json.dump({"exit_code": code, "pid": os.getpid()}, fh)
os.replace(out + ".tmp", out)
sys.exit(code if 0 <= code < 256 else 1)
"""


def base_env(environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    return {k: environ[k] for k in PASS_THROUGH_ENV if k in environ}


def _same_process(pid: int, create_time: float) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > 0.5 or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _read_record(run_dir: Path) -> dict[str, Any] | None:
    try:
        raw = json.loads((run_dir / RECORD).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return raw if isinstance(raw, dict) and "pid" in raw and "token" in raw else None


def _ref(job_id: str, run_dir: Path, raw: dict[str, Any]) -> LaunchRef:
    return LaunchRef(
        Launcher.LOCAL,
        job_id,
        str(raw["token"]),
        {
            "run_dir": str(run_dir),
            "pid": int(raw["pid"]),
            "create_time": float(raw["create_time"]),
            "log": str(raw.get("log", "")),
            "exit_file": str(raw.get("exit_file", "")),
            "progress_file": str(raw.get("progress_file", "")),
            "control_file": str(raw.get("control_file", "")),
            "progress_offset": int(raw.get("progress_offset", 0)),
        },
    )


def _launch_events(ref: LaunchRef) -> list[dict[str, Any]]:
    path = str(ref.where.get("progress_file") or "")
    return read_events(Path(path))[int(ref.where.get("progress_offset", 0)) :] if path else []


def find_launch(job_id: str, run_dir: Path, token: str) -> LaunchRef | None:
    """The launch of ``token`` recorded in ``run_dir`` if it still runs or ended with a final event; or the
    launch of an earlier token that still runs (the watch then asks it to checkpoint for this one)."""
    raw = _read_record(run_dir)
    if raw is None:
        return None
    ref = _ref(job_id, run_dir, raw)
    if _same_process(int(raw["pid"]), float(raw["create_time"])) is not None:
        return ref
    if ref.token != token:
        return None
    last = summarize(_launch_events(ref)).last_event
    return ref if last in FINAL_EVENTS else None  # checkpointed or killed mid-way: a new launch resumes it


def start(spec: LaunchSpec, run_dir: Path, *, cwd: Path, python: str = sys.executable) -> LaunchRef:
    """Start the workload of ``spec`` under the wrapper and record it before anything else can fail."""
    run_dir.mkdir(parents=True, exist_ok=True)
    Path(spec.paths.checkpoint_dir).mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        Path(spec.paths.control_file).unlink()  # a switch request is for the previous launch only
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    seq = len(list(logs.glob("launch-*.log")))
    log_path = logs / f"launch-{seq:03d}.log"
    exit_path = logs / f"launch-{seq:03d}.exit"
    env = {**spec.env_dict(), **base_env(os.environ)}  # the launcher's own variables are never overridden
    offset = len(read_events(Path(spec.paths.progress_file)))
    with open(log_path, "wb") as out:
        popen = subprocess.Popen(
            [python, "-c", WRAPPER, str(exit_path), spec.module, *spec.args],
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    raw = {
        "pid": popen.pid,
        "token": spec.token,
        "create_time": psutil.Process(popen.pid).create_time(),
        "log": log_path.name,
        "exit_file": str(exit_path),
        "progress_file": spec.paths.progress_file,
        "control_file": spec.paths.control_file,
        "progress_offset": offset,
        "started_at": time.time(),
    }
    tmp = run_dir / (RECORD + ".tmp")
    tmp.write_text(json.dumps(raw))
    tmp.replace(run_dir / RECORD)
    # the task that started it defers and exits: nobody waits for it, so it must not stay a zombie of ours
    popen.returncode = 0
    _reap_later(popen.pid)
    return _ref(spec.job_id, run_dir, raw)


def _reap_later(pid: int) -> None:
    """Reap the wrapper when it exits while this process still lives (tests run it in-process)."""
    import threading

    def wait() -> None:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)

    threading.Thread(target=wait, name=f"reap-{pid}", daemon=True).start()


def signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)  # its own session: the group is its pid (the workload and its data-parallel peers)


def request(control_file: str, action: str) -> None:
    """A switch (``checkpoint``) or ``stop`` request, written atomically where the workload polls."""
    path = Path(control_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"action": action, "reason": "elastico operator"}), encoding="utf-8")
    tmp.replace(path)


class LocalLaunch:
    """The watch side of a local launch (``launch.Launch``): pid, control file, progress file."""

    def __init__(self, ref: LaunchRef) -> None:
        self.ref = ref
        self.token = ref.token
        self._events: list[dict[str, Any]] = []
        self._read_bytes = 0

    def _alive(self) -> bool:
        return _same_process(int(self.ref.where["pid"]), float(self.ref.where["create_time"])) is not None

    async def poll(self) -> Probe:
        if self._alive():
            return Probe.running()
        return Probe(True, exit_code=_exit_code(self.ref))

    async def request(self, action: str) -> bool:
        try:
            request(str(self.ref.where["control_file"]), action)
        except OSError:
            return False
        return True

    async def terminate(self, *, force: bool) -> None:
        if self._alive():
            signal_group(int(self.ref.where["pid"]), signal.SIGKILL if force else signal.SIGTERM)

    async def events(self) -> list[dict[str, Any]]:
        """New lines of the progress file since the last call (read incrementally: the file only grows)."""
        path = Path(str(self.ref.where.get("progress_file") or ""))
        try:
            with open(path, "rb") as fh:
                if not self._read_bytes:  # skip the earlier launches' events
                    skip = int(self.ref.where.get("progress_offset", 0))
                    for _ in range(skip):
                        if not fh.readline():
                            break
                    self._read_bytes = fh.tell()
                fh.seek(self._read_bytes)
                chunk = fh.read()
        except OSError:
            return self._events
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            self._read_bytes += cut + 1
            for line in chunk[: cut + 1].decode("utf-8", "replace").splitlines():
                with contextlib.suppress(json.JSONDecodeError):
                    obj = json.loads(line)
                    if isinstance(obj, dict) and isinstance(obj.get("event"), str):
                        self._events.append(obj)
        return self._events


def _exit_code(ref: LaunchRef) -> int | None:
    try:
        raw = json.loads(Path(str(ref.where.get("exit_file") or "")).read_text())
    except (OSError, json.JSONDecodeError):
        return None  # killed with the wrapper (SIGKILL), or a launch recorded before the wrapper wrote codes
    code = raw.get("exit_code") if isinstance(raw, dict) else None
    if not isinstance(code, int):
        return None
    return 128 - code if code < 0 else code  # a signal (-9) reads as a shell would show it (137)


def outcome(ref: LaunchRef) -> Ended:
    """How a local launch ended: its progress events since it started and its exit code."""
    return Ended(ref.token, summarize(_launch_events(ref)), _exit_code(ref))


def terminate_now(ref: LaunchRef, grace_s: float = 30.0) -> None:
    """SIGTERM the launch, SIGKILL after ``grace_s`` (the task was killed: blocking is fine there)."""
    pid, created = int(ref.where["pid"]), float(ref.where["create_time"])
    if _same_process(pid, created) is None:
        return
    signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _same_process(pid, created) is not None:
        time.sleep(0.2)
    if _same_process(pid, created) is not None:
        signal_group(pid, signal.SIGKILL)


def log_lines(ref: LaunchRef, limit: int = 2000) -> Iterator[str]:
    """The last ``limit`` lines of the launch's log (streamed into the task log when the launch ended)."""
    path = Path(str(ref.where.get("run_dir", ""))) / "logs" / str(ref.where.get("log", ""))
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - (1 << 20)))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return iter(())
    return iter(text.splitlines()[-limit:])
