"""Machine-readable progress: the job appends JSON lines (``elastico_core.model.launch``) as it runs.

Writes are line-buffered appends, so a reader tailing the file (the profiler, the operator) sees whole
events; the reader side lives in ``elastico_core.profiling.tail``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from elastico_core.model.launch import StepEvent

__all__ = ["ProgressWriter", "StepEvent"]


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
            cpu_s=None if ev.cpu_s != ev.cpu_s else round(ev.cpu_s, 6),
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
