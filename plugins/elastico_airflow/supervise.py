"""What the operator does while a job's process runs, and what it makes of how the process ended.

Pure decisions over the workload's progress events and the job as the state shows it, shared by the
local and the Kubernetes launcher (they differ only in how they start, signal and observe a process):

* ``watch_action``: the controller asked for a switch or migration (checkpoint, relaunch with the
  target plan, resume), cancelled the job (stop) or took its GPUs back (checkpoint, wait again);
* ``outcome``: done / checkpointed / stopped / OOM / failed, from the last progress event and the exit;
* ``summarize``: the measured throughput (10-90 % trimmed mean of the per-step rates after warm-up, as
  §4.1 does), steps, samples and peak memory.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from elastico_core.model.launch import EXIT_OOM
from elastico_core.state.values import JobStatus

WARMUP_STEPS = 2


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every complete event of a progress file (JSON lines; a torn last line is skipped), [] if absent.

    Read here rather than through the workloads package: the file format is the launch contract's
    (``elastico_core.model.launch``), the reader is the launcher's own business.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.readlines()
    except OSError:
        return []
    out = []
    for line in lines:
        if not line.endswith("\n"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("event"), str):
            out.append(obj)
    return out


class Action(StrEnum):
    CONTINUE = "continue"
    SWITCH = "switch"  # checkpoint, relaunch with the switch target's plan, acknowledge its token
    STOP = "stop"  # cancelled: stop without saving
    REQUEUE = "requeue"  # back to pending (preempted): checkpoint, wait for a new admission


class Outcome(StrEnum):
    DONE = "done"
    CHECKPOINTED = "checkpointed"
    STOPPED = "stopped"
    OOM = "oom"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Summary:
    """What a process's progress file says about it (all of its launches, or one launch)."""

    last_event: str | None
    starts: int
    steps: int
    samples: float
    throughput: float | None  # workload unit per second, whole job
    peak_mem_mib: float | None
    device: str
    error: str
    # how far the job is, in what its workload counts: training steps, or a shard's rows (inference)
    done_items: int = 0
    total_items: int | None = None
    items: str = "steps"

    def to_dict(self) -> dict[str, Any]:
        return {
            "last_event": self.last_event,
            "starts": self.starts,
            "steps": self.steps,
            "samples": self.samples,
            "throughput": self.throughput,
            "peak_mem_mib": self.peak_mem_mib,
            "device": self.device,
            "error": self.error,
            "done_items": self.done_items,
            "total_items": self.total_items,
            "items": self.items,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Summary:
        def num(key: str) -> float | None:
            value = raw.get(key)
            return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None

        return cls(
            last_event=raw.get("last_event") if isinstance(raw.get("last_event"), str) else None,
            starts=int(raw.get("starts") or 0),
            steps=int(raw.get("steps") or 0),
            samples=float(raw.get("samples") or 0.0),
            throughput=num("throughput"),
            peak_mem_mib=num("peak_mem_mib"),
            device=str(raw.get("device") or ""),
            error=str(raw.get("error") or "")[:500],
            done_items=int(raw.get("done_items") or 0),
            total_items=int(raw["total_items"]) if isinstance(raw.get("total_items"), int) else None,
            items=str(raw.get("items") or "steps"),
        )


def trimmed_mean(values: list[float], lo: float = 0.1, hi: float = 0.9) -> float | None:
    """The 10-90 % trimmed mean of §4.1; the median below ten samples, where a trim removes nothing."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) < 10:
        return statistics.median(ordered)
    a, b = int(len(ordered) * lo), math.ceil(len(ordered) * hi)
    return statistics.fmean(ordered[a:b])


def summarize(events: Iterable[Mapping[str, Any]]) -> Summary:
    """Summary of progress events; the rate counts only the steps of the latest launch, after warm-up."""
    events = list(events)
    last: str | None = None
    starts = steps = 0
    samples = 0.0
    rates: list[float] = []
    mem: list[float] = []
    device, error = "", ""
    since_start = 0
    total: int | None = None
    rows_before = rows = 0  # inference: rows finished by earlier launches, and by this one
    items = "steps"
    for ev in events:
        kind = ev.get("event")
        if not isinstance(kind, str):
            continue
        last = kind
        if kind == "start":
            starts += 1
            since_start = 0
            rates = []
            device = str(ev.get("device") or ev.get("engine") or "")
            if isinstance(ev.get("total_steps"), int):
                total, items = int(ev["total_steps"]), "steps"
            elif isinstance(ev.get("rows"), int):  # a shard: its rows, of which `pending` were left at this launch
                total, items = int(ev["rows"]), "rows"
                rows_before, rows = max(0, int(ev["rows"]) - int(ev.get("pending") or 0)), 0
        elif kind == "step":
            since_start += 1
            steps = int(ev.get("step") or steps)
            if isinstance(ev.get("rows"), int):
                rows = int(ev["rows"])
            samples = float(ev.get("samples") or samples)
            rate = ev.get("rate")
            if since_start > WARMUP_STEPS and isinstance(rate, (int, float)) and rate > 0:
                rates.append(float(rate))
            m = ev.get("mem_mib")
            if isinstance(m, (int, float)) and math.isfinite(m):
                mem.append(float(m))
        elif kind in ("error", "oom"):
            error = str(ev.get("message") or "")[:500]
            peak = ev.get("peak_mib")  # the oom event's peak: how far the job got under its cap
            if kind == "oom" and isinstance(peak, (int, float)) and math.isfinite(peak):
                mem.append(float(peak))
                device = str(ev.get("device") or device)
        if kind in ("done", "checkpointed", "stopped") and isinstance(ev.get("samples"), (int, float)):
            samples = float(ev["samples"])
    if not rates and steps:
        # very short runs: every step counts rather than no measurement at all
        rates = [float(e["rate"]) for e in _steps(events) if isinstance(e.get("rate"), (int, float)) and e["rate"] > 0]
    done = rows_before + rows if items == "rows" else steps
    return Summary(last, starts, steps, samples, trimmed_mean(rates), max(mem) if mem else None, device, error,
                   done, total, items)


def _steps(events: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [e for e in events if e.get("event") == "step"]


OOM_MARKERS = ("out of memory", "outofmemory", "cuda error: out of memory", "oomkilled")


def outcome(summary: Summary, exit_code: int | None, *, oom_killed: bool = False) -> Outcome:
    """How a process ended. ``exit_code`` None: unknown (a reattached process that was not our child).

    Out of memory is read from the launch contract first (the job's last ``oom`` event, ``EXIT_OOM``, a
    container the kernel OOM-killed); the error text only for processes that predate the contract."""
    if oom_killed or summary.last_event == "oom" or exit_code == EXIT_OOM:
        return Outcome.OOM
    text = summary.error.lower()
    if any(m in text for m in OOM_MARKERS):
        return Outcome.OOM
    if summary.last_event == "done" and exit_code in (0, None):
        return Outcome.DONE
    if summary.last_event == "checkpointed" and exit_code in (0, None):
        return Outcome.CHECKPOINTED
    if summary.last_event == "stopped" and exit_code in (0, None):
        return Outcome.STOPPED
    return Outcome.FAILED


def watch_action(status: JobStatus | str, current_token: str, job_token: str | None) -> Action:
    """What the job's state asks of a process running the plan of ``current_token`` (``status``: the job's,
    or its name)."""
    status = JobStatus(status)
    if status.terminal:
        return Action.STOP
    if status is JobStatus.PENDING:
        return Action.REQUEUE
    if status is JobStatus.SWITCHING and job_token is not None and job_token != current_token:
        return Action.SWITCH
    return Action.CONTINUE


def failure_reason(summary: Summary, exit_code: int | None) -> str:
    if summary.error:
        return summary.error
    if exit_code is None:
        return f"process ended without a final progress event (last: {summary.last_event or 'none'})"
    return f"exit code {exit_code} (last progress event: {summary.last_event or 'none'})"
