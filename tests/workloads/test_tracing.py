"""The tracer reads memory and work off the workloads' own code, on fake tensors (tiny and small models)."""

from __future__ import annotations

import resource

import pytest
import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from elastico_core.model.errors import SpecError
from elastico_core.model.traced import TrainTrace
from elastico_core.workloads.scale import Scale
from elastico_core.workloads.tracing.cuda_paths import cuda_dispatch
from elastico_core.workloads.tracing.digest import training_digest
from elastico_core.workloads.tracing.infer import trace_inference
from elastico_core.workloads.tracing.train import trace_training
from elastico_core.workloads.zoo import build_task
from elastico_core.workloads.zoo.base import StepContext, generator

TINY = Scale.TINY


@pytest.fixture(scope="module")
def traces() -> dict[tuple[str, int, bool, bool], TrainTrace]:
    """A few tiny configurations, traced once for the module."""
    configs = [("resnet50", 32, False, False), ("resnet50", 32, False, True), ("resnet50", 64, False, False),
               ("bert", 32, False, False), ("bert", 32, True, False)]  # fmt: skip
    return {c: trace_training(*c, scale=TINY) for c in configs}


def test_state_parts_are_the_models_own(traces: dict[tuple[str, int, bool, bool], TrainTrace]) -> None:
    t = traces[("resnet50", 32, False, False)]
    fp32 = 4 * t.params
    assert t.gradients_bytes == fp32
    assert fp32 <= t.weights_bytes < fp32 * 1.1  # parameters and the batch-norm buffers
    assert 2 * fp32 <= t.optimizer_bytes < 2 * fp32 + 4096  # Adam's two moments (and its step counters)
    assert t.peak_allocated_bytes >= t.weights_bytes + t.optimizer_bytes + t.activations_bytes
    assert t.reserved_bytes >= t.peak_allocated_bytes  # the caching allocator never holds less than is live
    assert t.source == "traced" and t.digest == training_digest("elastico_core.workloads.zoo.resnet")


def test_flops_are_the_flop_counters_own(traces: dict[tuple[str, int, bool, bool], TrainTrace]) -> None:
    """The traced count equals FlopCounterMode's over a real iteration of the same model on the CPU."""
    task = build_task("resnet50", TINY, 0)
    task.make_optimizers()
    batch = task.batch(32, generator(0, 0, 0))
    with FlopCounterMode(display=False) as counter:
        task.train_step(batch, StepContext(torch.device("cpu"), False))
    assert traces[("resnet50", 32, False, False)].flops == counter.get_total_flops() > 0


def test_knobs_act_by_construction(traces: dict[tuple[str, int, bool, bool], TrainTrace]) -> None:
    fp32, amp, big = (traces[("resnet50", mb, False, a)] for mb, a in ((32, False), (32, True), (64, False)))
    assert amp.activations_bytes < 0.7 * fp32.activations_bytes  # BF16 saved tensors
    assert 1.8 < big.activations_bytes / fp32.activations_bytes < 2.1  # linear in the micro-batch
    assert amp.work != fp32.work and any(w.precision == "bf16" for w in amp.work)
    plain, ck = traces[("bert", 32, False, False)], traces[("bert", 32, True, False)]
    assert ck.activations_bytes < 0.6 * plain.activations_bytes  # only block inputs stay between the passes
    assert ck.flops > plain.flops  # the recomputed forward


def test_traced_dropout_keeps_a_byte_mask_and_attention_no_square() -> None:
    saved: list[torch.Tensor] = []
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), cuda_dispatch(), torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        x = torch.randn(4, 2, 64, 16, requires_grad=True)
        F.dropout(x, 0.1, training=True)
        F.scaled_dot_product_attention(x, x, x, dropout_p=0.1)
    assert any(t.dtype == torch.bool for t in saved)  # native_dropout's mask, as CUDA keeps it
    assert not any(t.dim() == 4 and t.shape[-1] == t.shape[-2] == 64 for t in saved)  # no B x h x S x S


def test_a_full_scale_model_is_traced_without_its_memory() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = trace_training("ncf", 8192, False, False)  # 31.8 M parameters, about 0.5 GiB on a GPU
    grew_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert t.params == 31_766_785 and t.peak_allocated_bytes > 400 * 2**20
    assert grew_mib < 150


def test_a_custom_model_builder_is_traced() -> None:
    t = trace_training("two-tower", 16, True, False, scale=TINY, model="tests.workloads.custom_model:build")
    assert t.workload == "two-tower" and t.params == 8 * 16 + 16 + 16 * 16 + 16 + 16 + 1
    assert t.digest == training_digest("tests.workloads.custom_model")
    for spec, why in (("tests.workloads.custom_model", "package.module:function"),
                      ("tests.workloads.nowhere:build", "not importable"),
                      ("tests.workloads.custom_model:missing", "no function"),
                      ("tests.workloads.custom_model:not_a_task", "not a Task")):  # fmt: skip
        with pytest.raises(SpecError, match=why):
            trace_training("two-tower", 16, False, False, scale=TINY, model=spec)


def test_an_inference_model_is_read_off_its_config() -> None:
    t = trace_inference("llama-3-7b")
    assert t.params == 8_030_261_248 and t.weights_bytes == 2 * t.params
    assert t.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, BF16
    assert 1.8 * 7.5e9 < t.flops_per_token < 2.2 * 8.1e9 and t.attention_flops_per_token_per_context > 0
