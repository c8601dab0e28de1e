"""The training entrypoint: progress, switch (checkpoint -> relaunch with other knobs -> resume), errors."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from elastico_core.profiling.tail import read_events
from elastico_core.workloads import checkpoint
from elastico_core.workloads.control import request
from elastico_core.workloads.train import main
from tests.workloads.wl_helpers import clean_env, run_module

TRAIN = "elastico_core.workloads.train"


def _train(tmp: Path, *args: str) -> int:
    return main(["--threads", "1", *args])


def _steps(events: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e for e in events if e["event"] == "step"]


def _launch(tmp: Path, knobs: str, steps: int, ckpt: Path, progress: Path, control: Path) -> subprocess.Popen[str]:
    args = ["--workload", "lstm", "--knobs", knobs, "--steps", str(steps), "--checkpoint-dir", str(ckpt),
            "--progress-file", str(progress), "--control-file", str(control)]  # fmt: skip
    return subprocess.Popen([sys.executable, "-m", TRAIN, *args], env=clean_env(), stderr=subprocess.PIPE, text=True)


def _wait_for_step(progress: Path, step: int, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.get("step", 0) >= step for e in _steps(read_events(progress))):  # type: ignore[operator]
            return
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.01)
    raise AssertionError(f"no step {step} within {timeout} s")


def test_progress_is_machine_readable(tmp_path: Path) -> None:
    progress = tmp_path / "p.jsonl"
    assert (
        _train(
            tmp_path,
            "--workload",
            "ncf",
            "--knobs",
            '{"micro_batch": 64}',
            "--steps",
            "7",
            "--progress-file",
            str(progress),
        )
        == 0
    )
    events = read_events(progress)
    assert events[0]["event"] == "start" and events[0]["workload"] == "ncf" and events[0]["knobs"]["micro_batch"] == 64  # type: ignore[index]
    steps = _steps(events)
    assert [e["step"] for e in steps] == list(range(1, 8))
    assert [e["samples"] for e in steps] == [64.0 * i for i in range(1, 8)]
    for e in steps:
        assert e["n"] == 64 and e["dt_s"] > 0 and e["rate"] == pytest.approx(64 / e["dt_s"], rel=1e-3)  # type: ignore[operator]
        assert e["mem_mib"] is not None
    assert events[-1]["event"] == "done" and events[-1]["step"] == 7


def test_switch_midway_resumes_at_the_same_step_and_ends_like_an_uninterrupted_run(tmp_path: Path) -> None:
    steps = 60
    whole = tmp_path / "whole"
    assert (
        _train(
            tmp_path,
            "--workload",
            "lstm",
            "--knobs",
            '{"micro_batch": 64}',
            "--steps",
            str(steps),
            "--checkpoint-dir",
            str(whole),
        )
        == 0
    )

    ckpt, progress, control = tmp_path / "ck", tmp_path / "p.jsonl", tmp_path / "control.json"
    proc = _launch(tmp_path, '{"micro_batch": 64}', steps, ckpt, progress, control)
    _wait_for_step(progress, 5, proc)
    request(control, "checkpoint", "switch to mb=64 with checkpointing")
    assert proc.wait(timeout=60) == 0
    first = read_events(progress)
    assert first[-1]["event"] == "checkpointed"
    k = int(first[-1]["step"])  # type: ignore[call-overload]
    assert 5 <= k < steps
    saved = checkpoint.load(ckpt)
    assert saved is not None and saved["step"] == k
    control.unlink()

    relaunch = tmp_path / "p2.jsonl"
    knobs = '{"micro_batch": 32, "checkpointing": true, "amp": true}'
    assert _train(tmp_path, "--workload", "lstm", "--knobs", knobs, "--steps", str(steps), "--checkpoint-dir", str(ckpt),
                  "--progress-file", str(relaunch)) == 0  # fmt: skip
    second = read_events(relaunch)
    assert second[0]["resumed"] is True and second[0]["step"] == k and second[0]["knobs"]["checkpointing"] is True  # type: ignore[index]
    assert _steps(second)[0]["step"] == k + 1
    assert second[-1]["event"] == "done" and second[-1]["step"] == steps
    end_whole, end_switched = checkpoint.load(whole), checkpoint.load(ckpt)
    assert end_whole is not None and end_switched is not None
    assert end_switched["step"] == end_whole["step"] == steps


def test_sigterm_checkpoints_and_an_unchanged_relaunch_is_bit_identical(tmp_path: Path) -> None:
    steps = 60
    whole = tmp_path / "whole"
    assert (
        _train(
            tmp_path,
            "--workload",
            "lstm",
            "--knobs",
            '{"micro_batch": 64}',
            "--steps",
            str(steps),
            "--checkpoint-dir",
            str(whole),
        )
        == 0
    )

    ckpt, progress = tmp_path / "ck", tmp_path / "p.jsonl"
    proc = _launch(tmp_path, '{"micro_batch": 64}', steps, ckpt, progress, tmp_path / "unused")
    _wait_for_step(progress, 5, proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    last = read_events(progress)[-1]
    assert last["event"] == "checkpointed"
    assert checkpoint.load(ckpt)["step"] == last["step"]  # type: ignore[index]
    assert (
        _train(
            tmp_path,
            "--workload",
            "lstm",
            "--knobs",
            '{"micro_batch": 64}',
            "--steps",
            str(steps),
            "--checkpoint-dir",
            str(ckpt),
        )
        == 0
    )
    a, b = checkpoint.load(whole), checkpoint.load(ckpt)
    assert a is not None and b is not None
    for name, tensor in a["task"]["modules"]["net"].items():
        assert torch.equal(tensor, b["task"]["modules"]["net"][name]), name


def test_stop_request_exits_without_saving(tmp_path: Path) -> None:
    control = tmp_path / "control.json"
    request(control, "stop")
    progress = tmp_path / "p.jsonl"
    assert _train(tmp_path, "--workload", "ppo", "--knobs", '{"micro_batch": 32}', "--checkpoint-dir", str(tmp_path / "ck"),
                  "--control-file", str(control), "--progress-file", str(progress)) == 0  # fmt: skip
    assert read_events(progress)[-1]["event"] == "stopped"
    assert checkpoint.load(tmp_path / "ck") is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "resnet18"], "unknown train workload 'resnet18'"),
        (["--workload", "resnet50", "--knobs", '{"microbatch": 64}'], "unknown knob 'microbatch'"),
        (
            ["--workload", "resnet50", "--knobs", '{"micro_batch": 100}'],
            "knobs.micro_batch: value 100 is outside the grid",
        ),
        (["--workload", "lstm", "--scale", "huge"], "unknown scale 'huge'"),
    ],
    ids=["workload", "knob", "off-grid", "scale"],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--steps", "1", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_unwritable_checkpoint_path_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["--workload", "lstm", "--steps", "1", "--checkpoint-dir", str(blocker / "ck")]) == 2
    assert f"checkpoint dir '{blocker / 'ck'}': not writable" in capsys.readouterr().err


def test_damaged_or_foreign_checkpoint_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "checkpoint.pt").write_bytes(b"\x00garbage")
    assert main(["--workload", "lstm", "--steps", "2", "--checkpoint-dir", str(tmp_path / "ck")]) == 2
    assert "checkpoint.pt: unreadable checkpoint" in capsys.readouterr().err
    assert main(["--workload", "ncf", "--steps", "1", "--checkpoint-dir", str(tmp_path / "ncf")]) == 0
    assert main(["--workload", "lstm", "--steps", "2", "--checkpoint-dir", str(tmp_path / "ncf")]) == 2
    assert "checkpoint is of workload 'ncf', this run is 'lstm'" in capsys.readouterr().err


@pytest.mark.slow  # three interpreters import torch and rendezvous over gloo
def test_data_parallel_degree_two_on_gloo(tmp_path: Path) -> None:
    progress = tmp_path / "p.jsonl"
    out = run_module(TRAIN, "--workload", "lstm", "--knobs", '{"micro_batch": 32, "dp": 2}', "--steps", "4",
                     "--progress-file", str(progress), "--checkpoint-dir", str(tmp_path / "ck"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    events = read_events(progress)
    assert events[0]["dp"] == 2
    assert [e["n"] for e in _steps(events)] == [64] * 4  # 2 ranks x micro-batch 32 per iteration
    assert events[-1]["event"] == "done"
    assert json.loads(json.dumps(checkpoint.load(tmp_path / "ck")["step"])) == 4  # type: ignore[index]
