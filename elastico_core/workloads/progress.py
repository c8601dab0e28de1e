"""Machine-readable progress: JSON lines the job appends and the operator and profiler read.

One object per line (see ``elastico_core.model.launch``). Writes are line-buffered appends, so a reader
tailing the file sees whole events; a torn last line (the job was killed mid-write) is skipped.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any


@dataclass(frozen=True, slots=True)
class StepEvent:
    """One iteration: ``n`` samples (training) or generated tokens (inference) in ``dt_s`` seconds."""

    step: int
    samples: float  # cumulative, including steps before a resume
    n: float
    dt_s: float
    t: float  # wall clock (time.time()) at the end of the iteration
    mem_mib: float = float("nan")  # peak device memory so far (CPU: peak RSS above the pre-model baseline)

    @property
    def rate(self) -> float:
        return self.n / self.dt_s if self.dt_s > 0 else 0.0


@dataclass
class ProgressWriter:
    """Appends events to a file (or stderr when no file is configured); only rank 0 writes."""

    path: Path | None
    enabled: bool = True
    _fh: IO[str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.enabled:
            return
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed in close()

    def emit(self, event: str, **fields: Any) -> None:
        if not self.enabled:
            return
        record = {"event": event, "t": round(time.time(), 6), **fields}
        line = json.dumps(record, separators=(",", ":"), default=_plain) + "\n"
        if self._fh is not None:
            self._fh.write(line)
        else:
            sys.stderr.write(line)

    def step(self, ev: StepEvent, **extra: Any) -> None:
        self.emit(
            "step",
            step=ev.step,
            samples=ev.samples,
            n=ev.n,
            dt_s=round(ev.dt_s, 6),
            rate=round(ev.rate, 4),
            mem_mib=None if ev.mem_mib != ev.mem_mib else round(ev.mem_mib, 2),
            **extra,
        )

    def close(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None


def _plain(obj: object) -> object:
    if hasattr(obj, "item"):
        return obj.item()  # type: ignore[attr-defined]
    return str(obj)


def parse_line(line: str) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) and "event" in obj else None


def step_event(obj: dict[str, Any]) -> StepEvent:
    mem = obj.get("mem_mib")
    return StepEvent(
        step=int(obj["step"]),
        samples=float(obj["samples"]),
        n=float(obj["n"]),
        dt_s=float(obj["dt_s"]),
        t=float(obj["t"]),
        mem_mib=float("nan") if mem is None else float(mem),
    )


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete events of a progress file (empty when it does not exist yet)."""
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as fh:
        return [e for e in (parse_line(line) for line in fh if line.endswith("\n")) if e is not None]


@dataclass
class ProgressTail:
    """Incremental reader: each ``poll`` returns the events appended since the previous call."""

    path: Path
    _offset: int = 0
    _partial: str = ""

    def poll(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as fh:
            fh.seek(self._offset)
            chunk = fh.read()
            self._offset = fh.tell()
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        for line in lines:
            event = parse_line(line)
            if event is not None:
                yield event
