"""The local launcher: an admitted plan's workload as a process on the worker's machine (the embedded default).

The process gets exactly the ``LaunchSpec`` environment (plus the few variables an interpreter needs to
start: ``PATH``, ``HOME``, locale, ``VIRTUAL_ENV``/``PYTHONPATH``) — never the worker's own environment,
which holds Airflow's secrets. It runs in its own session, so it outlives a worker that dies, as a pod
outlives its Airflow worker; ``process.json`` in the job's run folder records its pid and start time, and
a retried task reattaches to it (``LocalProcess.attach``) instead of launching the job twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

from elastico_airflow.launchspec import LaunchSpec
from elastico_airflow.supervise import read_events

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


@dataclass
class LocalProcess:
    """One running workload process (ours, or one a previous try started and we reattached to)."""

    pid: int
    token: str
    create_time: float
    run_dir: Path
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    progress_offset: int = 0  # events of the progress file before this launch (earlier launches)
    _log_offset: int = field(default=0, repr=False)
    _log_fh: IO[bytes] | None = field(default=None, repr=False)

    @classmethod
    def start(cls, spec: LaunchSpec, run_dir: Path, *, cwd: Path, python: str = sys.executable) -> LocalProcess:
        """Start the workload of ``spec`` and record it (before anything else can fail)."""
        run_dir.mkdir(parents=True, exist_ok=True)
        Path(spec.paths.checkpoint_dir).mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            Path(spec.paths.control_file).unlink()  # a switch request is for the previous launch only
        logs = run_dir / "logs"
        logs.mkdir(exist_ok=True)
        seq = len(list(logs.glob("launch-*.log")))
        log_path = logs / f"launch-{seq:03d}.log"
        env = {**spec.env_dict(), **base_env(os.environ)}  # the launcher's own variables are never overridden
        offset = len(read_events(Path(spec.paths.progress_file)))
        with open(log_path, "wb") as out:
            popen = subprocess.Popen(
                spec.argv(python),
                env=env,
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        create_time = psutil.Process(popen.pid).create_time()
        proc = cls(popen.pid, spec.token, create_time, run_dir, log_path, popen, offset)
        proc._record()
        return proc

    def _record(self) -> None:
        tmp = self.run_dir / (RECORD + ".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "pid": self.pid,
                    "token": self.token,
                    "create_time": self.create_time,
                    "log": self.log_path.name,
                    "progress_offset": self.progress_offset,
                    "started_at": time.time(),
                }
            )
        )
        tmp.replace(self.run_dir / RECORD)

    @classmethod
    def attach(cls, run_dir: Path) -> LocalProcess | None:
        """The process a previous try started, if it still runs."""
        try:
            raw = json.loads((run_dir / RECORD).read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if _same_process(int(raw["pid"]), float(raw["create_time"])) is None:
            return None
        log_path = run_dir / "logs" / str(raw.get("log", "launch-000.log"))
        proc = cls(
            int(raw["pid"]),
            str(raw["token"]),
            float(raw["create_time"]),
            run_dir,
            log_path,
            progress_offset=int(raw.get("progress_offset", 0)),
        )
        with contextlib.suppress(OSError):
            proc._log_offset = log_path.stat().st_size  # the previous try already streamed what is there
        return proc

    @staticmethod
    def recorded_token(run_dir: Path) -> str | None:
        try:
            return str(json.loads((run_dir / RECORD).read_text())["token"])
        except (OSError, json.JSONDecodeError, KeyError):
            return None

    @staticmethod
    def recorded_offset(run_dir: Path) -> int:
        try:
            return int(json.loads((run_dir / RECORD).read_text()).get("progress_offset", 0))
        except (OSError, json.JSONDecodeError, ValueError):
            return 0

    @staticmethod
    def request(control_file: str, action: str) -> None:
        """A switch (``checkpoint``) or ``stop`` request, written atomically where the workload polls."""
        path = Path(control_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"action": action, "reason": "elastico operator"}), encoding="utf-8")
        tmp.replace(path)

    def poll(self) -> tuple[bool, int | None]:
        """(still running, exit code); the exit code is None for a reattached process (not our child)."""
        if self.popen is not None:
            code = self.popen.poll()
            return code is None, code
        return _same_process(self.pid, self.create_time) is not None, None

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the process to end; True when it did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.poll()[0]:
                return True
            time.sleep(0.2)
        return not self.poll()[0]

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)  # its own session: the group is its pid (covers data-parallel peers)

    def terminate(self, grace_s: float = 60.0) -> None:
        """SIGTERM (the workload checkpoints), then SIGKILL after ``grace_s``."""
        if not self.poll()[0]:
            return
        self.signal_group(signal.SIGTERM)
        if not self.wait(grace_s):
            self.signal_group(signal.SIGKILL)
            self.wait(10.0)

    def new_log_lines(self, limit: int = 200) -> list[str]:
        """Lines appended to the process log since the last call (streamed into the task log)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._log_offset)
                chunk = fh.read(1 << 20)
        except OSError:
            return []
        cut = chunk.rfind(b"\n")
        if cut < 0:
            return []
        self._log_offset += cut + 1
        lines = chunk[: cut + 1].decode("utf-8", "replace").splitlines()
        return lines[-limit:]
