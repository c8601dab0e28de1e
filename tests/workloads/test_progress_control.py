"""Progress lines and switch requests: the two small protocols between a job and its operator."""

from __future__ import annotations

import json
from pathlib import Path

from elastico_core.profiling.tail import ProgressTail, read_events
from elastico_core.workloads.control import CHECKPOINT, NONE, STOP, StopRequests, read_control, request
from elastico_core.workloads.progress import ProgressWriter, StepEvent


def test_tail_returns_whole_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    tail = ProgressTail(path)
    assert list(tail.poll()) == []
    with open(path, "w") as fh:
        fh.write(json.dumps({"event": "start"}) + "\n" + '{"event": "st')
    assert [e["event"] for e in tail.poll()] == ["start"]
    with open(path, "a") as fh:
        fh.write('ep", "step": 1}\nnot json\n')
    assert [e["event"] for e in tail.poll()] == ["step"]
    assert [e["event"] for e in read_events(path)] == ["start", "step"]


def test_writer_round_trip(tmp_path: Path) -> None:
    w = ProgressWriter(tmp_path / "sub" / "p.jsonl")
    w.emit("start", workload="lstm")
    w.step(StepEvent(1, 32, 32, 0.5, 0.0, 12.5), loss=1.0)
    w.close()
    events = read_events(tmp_path / "sub" / "p.jsonl")
    assert events[1]["rate"] == 64.0 and events[1]["mem_mib"] == 12.5 and events[1]["loss"] == 1.0


def test_control_file_actions(tmp_path: Path) -> None:
    path = tmp_path / "control.json"
    stops = StopRequests(path)
    assert stops.poll() == NONE
    request(path, "stop")
    assert stops.poll() == STOP
    request(path, "checkpoint", "switch")
    assert read_control(path) == CHECKPOINT
    path.write_text("")
    assert read_control(path) == CHECKPOINT  # an empty file is a request too (touch works)
    path.write_text("{not json")
    assert read_control(path) == CHECKPOINT
