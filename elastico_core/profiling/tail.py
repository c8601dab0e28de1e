"""Reading a job's progress file (``elastico_core.model.launch``) while it is being written."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from elastico_core.model.launch import parse_progress_line


def read_events(path: Path) -> list[dict[str, object]]:
    """All complete events of a progress file (empty when it does not exist yet)."""
    if not path.exists():
        return []
    with open(path, encoding="utf-8") as fh:
        return [e for e in (parse_progress_line(line) for line in fh if line.endswith("\n")) if e is not None]


@dataclass
class ProgressTail:
    """Incremental reader: each ``poll`` returns the events appended since the previous call."""

    path: Path
    _offset: int = 0
    _partial: str = ""

    def poll(self) -> Iterator[dict[str, object]]:
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as fh:
            fh.seek(self._offset)
            chunk = fh.read()
            self._offset = fh.tell()
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()  # a torn last line waits for the rest
        for line in lines:
            event = parse_progress_line(line)
            if event is not None:
                yield event
