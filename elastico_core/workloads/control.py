"""Switch requests: SIGTERM or the control file ask the job to stop at the next iteration boundary."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from elastico_core.model.launch import CONTROL_CHECKPOINT, CONTROL_STOP, control_action, control_json

NONE, STOP, CHECKPOINT = 0, 1, 2  # ordered: the strongest request wins across data-parallel ranks


@dataclass
class StopRequests:
    """Collects stop requests; ``poll`` is cheap (one stat) so it runs every iteration."""

    control_file: Path | None
    _signalled: bool = field(default=False, repr=False)

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self._signalled = True

    def poll(self) -> int:
        """NONE, STOP or CHECKPOINT (SIGTERM counts as CHECKPOINT: a drained pod must not lose work)."""
        if self._signalled:
            return CHECKPOINT
        if self.control_file is None or not self.control_file.exists():
            return NONE
        return read_control(self.control_file)


def read_control(path: Path) -> int:
    """The request in a control file; an empty or unparsable file means ``checkpoint`` (the safe choice)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return NONE
    return STOP if control_action(text) == CONTROL_STOP else CHECKPOINT


def request(path: Path, action: str = CONTROL_CHECKPOINT, reason: str = "") -> None:
    """Write a switch request atomically (what the operator or a test does)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(control_json(action, reason), encoding="utf-8")
    tmp.replace(path)
