"""The eight training models: real architectures (paper-size parameter counts), knobs that act on them."""

from __future__ import annotations

import math

import pytest
import torch

from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.workloads.contract import TRAIN_WORKLOADS
from elastico_core.workloads.memory import MemoryMeter
from elastico_core.workloads.scale import Scale
from elastico_core.workloads.zoo import build_task
from elastico_core.workloads.zoo.base import StepContext, generator

CPU = torch.device("cpu")


def test_the_zoo_covers_table_2() -> None:
    assert set(TRAIN_WORKLOADS) == {"resnet50", "bert", "dcgan", "pointnet", "transformer", "lstm", "ncf", "ppo"}


@pytest.mark.parametrize("name", TRAIN_WORKLOADS)
def test_full_scale_is_the_paper_model(name: str) -> None:
    """Built on the meta device (no memory): parameter counts within 15 % of the catalog's."""
    with torch.device("meta"):
        task = build_task(name, Scale.FULL)
    assert task.param_count() == pytest.approx(PAPER_WORKLOADS[name].params, rel=0.15)


def test_resnet50_is_exactly_resnet50() -> None:
    with torch.device("meta"):
        assert build_task("resnet50", Scale.FULL).param_count() == 25_557_032


@pytest.mark.parametrize("name", TRAIN_WORKLOADS)
@pytest.mark.parametrize(("ck", "amp"), [(False, False), (True, False), (False, True)], ids=["plain", "ck", "amp"])
def test_one_step_trains(name: str, ck: bool, amp: bool) -> None:
    task = build_task(name, Scale.TINY, seed=0)
    task.set_checkpointing(ck)
    task.make_optimizers()
    before = [p.detach().clone() for _, m in task.raw_modules() for p in m.parameters()]
    loss = task.train_step(task.batch(32, generator(0, 0, 0)), StepContext(CPU, amp))
    after = [p.detach() for _, m in task.raw_modules() for p in m.parameters()]
    assert math.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def _saved_bytes(name: str, ck: bool, mb: int = 64) -> int:
    task = build_task(name, Scale.TINY)
    task.set_checkpointing(ck)
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        task.loss(task.batch(mb, generator(0, 0, 0)))
    return sum(seen.values())


@pytest.mark.parametrize("name", ["resnet50", "bert", "transformer", "lstm", "pointnet"])
def test_checkpointing_keeps_fewer_activations(name: str) -> None:
    assert _saved_bytes(name, ck=True) < 0.6 * _saved_bytes(name, ck=False)


def test_checkpointing_recomputes_the_same_gradients() -> None:
    grads = []
    for ck in (False, True):
        task = build_task("bert", Scale.TINY, seed=3)
        task.set_checkpointing(ck)
        for m in task.modules.values():
            m.eval()  # no dropout, so both passes compute the same function
        loss = task.loss(task.batch(8, generator(0, 0, 0)))
        loss.backward()
        grads.append(
            torch.cat([p.grad.flatten() for _, m in task.raw_modules() for p in m.parameters() if p.grad is not None])
        )
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_memory_meter_sees_checkpointing_and_batch_size() -> None:
    def peak(mb: int, ck: bool) -> float:
        meter = MemoryMeter(CPU)
        task = build_task("resnet50", Scale.TINY)
        task.set_checkpointing(ck)
        for _, m in task.raw_modules():
            meter.attach(m)
        task.make_optimizers()
        ctx = StepContext(CPU, False)
        for step in range(2):
            task.train_step(task.batch(mb, generator(0, step, 0)), ctx)
        return meter.peak_mib()

    if MemoryMeter(CPU).method != "mallinfo2":
        pytest.skip("needs glibc's mallinfo2 to count live allocations")
    assert peak(128, False) > peak(32, False)
    assert peak(128, True) < peak(128, False)


def test_data_is_a_function_of_seed_step_rank() -> None:
    task = build_task("lstm", Scale.TINY)
    a = task.batch(16, generator(1, 5, 0))
    b = task.batch(16, generator(1, 5, 0))
    c = task.batch(16, generator(1, 5, 1))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0])


def test_ppo_counts_environment_steps() -> None:
    task = build_task("ppo", Scale.TINY)
    task.make_optimizers()
    obs, acts, *_ = task.batch(64, generator(0, 0, 0))
    assert obs.shape == (64, 4) and acts.shape == (64,)
    assert task.samples(64) == 64
