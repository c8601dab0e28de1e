"""Out of memory under a budget: a last ``oom`` event and the dedicated exit code, read by the launchers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from elastico_core.model.launch import ENV_MEM_BUDGET, EXIT_OOM
from elastico_core.profiling.launcher import JobFailed
from elastico_core.profiling.tail import read_events
from elastico_core.workloads.runtime import StepTimer, is_out_of_memory
from elastico_core.workloads.scale import Scale
from elastico_core.workloads.zoo import build_task
from elastico_core.workloads.zoo.base import generator
from tests.workloads.wl_helpers import clean_env, run_module

TRAIN = "elastico_core.workloads.train"


def _run(tmp: Path, budget_mib: int) -> tuple[int, list[dict[str, object]], str]:
    progress = tmp / f"p{budget_mib}.jsonl"
    done = run_module(TRAIN, "--workload", "resnet50", "--knobs", '{"micro_batch": 32}', "--steps", "6",
                      "--progress-file", str(progress), env=clean_env(**{ENV_MEM_BUDGET: str(budget_mib)}))  # fmt: skip
    return done.returncode, read_events(progress), done.stderr


def test_a_budget_too_small_ends_in_the_oom_event_and_exit_code(tmp_path: Path) -> None:
    code, events, stderr = _run(tmp_path, 8)
    assert code == EXIT_OOM, stderr
    last = events[-1]
    assert last["event"] == "oom" and last["budget_mib"] == 8
    assert isinstance(last["peak_mib"], float) and math.isfinite(last["peak_mib"])
    assert "Traceback" not in stderr


def test_a_budget_that_is_enough_runs_to_the_end(tmp_path: Path) -> None:
    code, events, stderr = _run(tmp_path, 2048)
    assert code == 0, stderr
    assert events[-1]["event"] == "done" and max(e.get("step", 0) for e in events) == 6  # type: ignore[type-var]


def test_the_launchers_read_the_contract_not_the_text() -> None:
    assert JobFailed("w", EXIT_OOM, "no words about memory here").out_of_memory
    assert JobFailed("w", 1, "", {"event": "oom"}).out_of_memory
    assert not JobFailed("w", 1, "ValueError: something else").out_of_memory
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not is_out_of_memory(RuntimeError("could not create a primitive"))  # only under this process's cap


def test_batches_come_from_the_generator_of_the_step_on_its_device() -> None:
    task = build_task("bert", Scale.TINY, 0)
    a = task.batch(4, generator(3, 7, 0, "cpu"))
    b = task.batch(4, generator(3, 7, 0, torch.device("cpu")))
    c = task.batch(4, generator(3, 8, 0, "cpu"))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)) and not torch.equal(a[0], c[0])


def test_step_timer_reports_each_iteration_with_its_loss_on_cpu() -> None:
    timer: StepTimer[int] = StepTimer(torch.device("cpu"))
    done = [d for i in range(3) for d in timer.end(i, torch.tensor(float(i)))] + timer.drain()
    assert [d.item for d in done] == [0, 1, 2] and [d.loss for d in done] == [0.0, 1.0, 2.0]
    assert all(d.dt_s >= 0 for d in done) and done[0].t <= done[-1].t
    assert json.dumps([d.loss for d in done])  # plain floats
