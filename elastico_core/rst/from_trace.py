"""Estimates for a GPU from traced figures and the GPU's datasheet: memory by construction, time by roofline.

Memory of a training configuration on one GPU (MiB)::

    reserved   the CUDA caching allocator's reserve for two traced iterations (``workloads.tracing``:
               weights, gradients, optimizer state, batch, kept activations and temporaries, replayed
               through the allocator's rounding, pools and splitting)              -- modelled
    + DDP      gradient buckets when dp > 1: one more copy of the gradients        -- modelled
    + cuBLAS   the workspace PyTorch gives cuBLAS: CUBLAS_WORKSPACE_CONFIG's default,
               :4096:8 on Hopper (32 MiB), :4096:2:16:8 before it (8.1 MiB)        -- constant
    + cuDNN    autotuning workspace, only where convolutions run in FP32/TF32      -- constant
    + context  the CUDA context, kernels and library handles of the process        -- constant

The constants are public figures, not fitted to any measurement:

* ``CUDA_CONTEXT_MIB`` = 723: the device memory one process holds before its first tensor, as
  reported on the PyTorch forum ("What is the reason for pytorch's GPU memory floor?": 723 MiB after
  ``torch.randn(1).cuda()``);
* ``CUBLAS_WORKSPACE_MIB``: PyTorch's documented ``CUBLAS_WORKSPACE_CONFIG`` defaults;
* ``CUDNN_AUTOTUNE_MIB`` = 4096: with ``cudnn.benchmark`` PyTorch lets cuDNN try every candidate engine
  and allocates the largest workspace any of them asks for, bounded only by free device memory; the
  engines that ask for "a significant memory workspace" are the FFT ones (cuDNN's API reference), which
  exist for FP32/FP16 data but not BF16. Their sizes are cuDNN's own and cannot be traced, so the
  allowance is TensorFlow's documented default cap on cuDNN autotuning workspace
  (``TF_CUDNN_WORKSPACE_LIMIT_IN_MB`` = 4096).

Time of one iteration on a GPU with peak FLOP/s P (TF32 or BF16 tensor cores) and bandwidth B::

    device = sum over traced work groups of max(flops / P, bytes / B) / efficiency + kernels x 2 us
    host   = operators issued x 15 us
    T      = dp x dp_efficiency^log2(dp) x samples / max(device, host)

Each work group holds operators of one precision and one arithmetic-intensity bin, so the maximum is
the roofline of each operator (a group straddles the ridge point by at most half an octave). The GPU
runs ahead of the host (no host synchronisation in an iteration), so an iteration takes whichever is
longer. The constants: 2 us is the shortest a kernel occupies the GPU back to back (launch latency,
CUDA 12 and later); 15 us the host's cost of one eager operator, the middle of the 5-25 us that Python,
autograd, the dispatcher and the launch take per operator on current CPUs; ``PRIOR_EFFICIENCY`` = 0.5 the share of the roofline large
training jobs reach (46-52 % model FLOPs utilisation for PaLM and Megatron-LM). Calibration
(``rst.efficiency``) replaces the prior with an efficiency fitted per workload family.

vLLM inference from an inference trace: the weights and KV cache per token of the model's config take
the place of the parametric shape's figures (``rst.estimators``); memory is gpu_memory_utilization of
the device, as vLLM pre-allocates it.
"""

from __future__ import annotations

import math
from dataclasses import replace

from elastico_core.model.hardware import GpuModel, HardwareSignature
from elastico_core.model.job import DP_KNOB
from elastico_core.model.knobs import Knobs
from elastico_core.model.profile import Counters, Profile, Source
from elastico_core.model.resources import ResourceVector
from elastico_core.model.traced import InferTrace, TrainTrace
from elastico_core.model.workload import InferShape, JobKind, TrainShape, Workload
from elastico_core.rst import estimators

MIB = float(1 << 20)
CUDA_CONTEXT_MIB = 723.0
CUBLAS_WORKSPACE_MIB = {"hopper": 32.0, "before": 8.125}
CUDNN_AUTOTUNE_MIB = 4096.0
KERNEL_MIN_S = 2e-6
HOST_OP_S = 15e-6
PRIOR_EFFICIENCY = 0.5
HOPPER = ("h100", "h200")


def cublas_workspace_mib(gpu: GpuModel) -> float:
    return CUBLAS_WORKSPACE_MIB["hopper" if gpu.name.startswith(HOPPER) else "before"]


def memory_parts_mib(trace: TrainTrace, gpu: GpuModel, dp: int = 1) -> dict[str, float]:
    """The memory of one configuration on ``gpu``, part by part (MiB); the sum is the estimate."""
    has_matmul = any(w.flops > 0 for w in trace.work)
    return {
        "reserved": trace.reserved_bytes / MIB,
        "ddp_buckets": trace.gradients_bytes / MIB if dp > 1 else 0.0,
        "cublas_workspace": cublas_workspace_mib(gpu) if has_matmul else 0.0,
        "cudnn_autotune": CUDNN_AUTOTUNE_MIB if trace.fp32_convolutions else 0.0,
        "cuda_context": CUDA_CONTEXT_MIB,
    }


def train_memory_mib(trace: TrainTrace, gpu: GpuModel, dp: int = 1) -> float:
    return sum(memory_parts_mib(trace, gpu, dp).values())


def roofline_parts_s(trace: TrainTrace, gpu: GpuModel) -> tuple[float, float]:
    """(compute-bound, bandwidth-bound) device seconds at 100 % of the roofline, each work group at its bound."""
    bw = gpu.mem_bw_gbs * 1e9
    tf32, bf16 = gpu.fp32_tflops * 1e12, gpu.bf16_tflops * 1e12
    compute = memory = 0.0
    for w in trace.work:
        c = w.flops / (bf16 if w.precision == "bf16" else tf32)
        m = w.nbytes / bw
        if c > m:
            compute += c
        else:
            memory += m
    return compute, memory


def roofline_s(trace: TrainTrace, gpu: GpuModel) -> float:
    """The iteration's device time at 100 % of the roofline (each work group at its bound)."""
    return sum(roofline_parts_s(trace, gpu))


def iteration_s(trace: TrainTrace, gpu: GpuModel, efficiency: float = PRIOR_EFFICIENCY) -> tuple[float, float]:
    """(device seconds, host seconds) of one iteration."""
    device = roofline_s(trace, gpu) / efficiency + trace.kernels * KERNEL_MIN_S
    host = trace.dispatched * HOST_OP_S
    return device, host


def train_throughput(trace: TrainTrace, gpu: GpuModel, dp: int, dp_efficiency: float, efficiency: float) -> float:
    device, host = iteration_s(trace, gpu, efficiency)
    scaling = dp * dp_efficiency ** math.log2(dp) if dp > 1 else 1.0
    return scaling * trace.samples / max(device, host)


def traced_train_profile(
    workload: Workload, knobs: Knobs, trace: TrainTrace, gpu: GpuModel, efficiency: float = PRIOR_EFFICIENCY, note: str = ""
) -> Profile | None:
    """The profile of one training configuration on ``gpu`` from its trace; None if it does not fit."""
    shape = workload.shape
    assert isinstance(shape, TrainShape)
    dp = int(knobs.get(DP_KNOB, 1) or 1)
    mem = train_memory_mib(trace, gpu, dp)
    if mem > gpu.memory_mib:
        return None
    device, host = iteration_s(trace, gpu, efficiency)
    busy = min(1.0, device / max(device, host))
    throughput = train_throughput(trace, gpu, dp, shape.dp_efficiency, efficiency)
    sm_active = min(0.99, busy)
    counters = Counters(sm_active=sm_active, fb_used_mb=mem,
                        dram_active=min(0.95, sm_active * _dram_share(trace, gpu)))  # fmt: skip
    return Profile(
        workload=workload.name,
        knobs=knobs,
        signature=HardwareSignature.estimated(gpu),
        resources=ResourceVector(sm=round(sm_active, 4), gpu_mem_mib=round(mem, 1), cpu_cores=shape.cpu_cores,
                                 host_mem_mib=shape.host_mem_gib * 1024.0),
        throughput=throughput,
        unit=workload.unit,
        source=Source.ESTIMATED,
        counters=counters,
        provenance=note or trace_note(trace, efficiency),
    )


def _dram_share(trace: TrainTrace, gpu: GpuModel) -> float:
    """Share of the roofline time that is bandwidth-bound (DRAM activity while busy)."""
    compute, memory = roofline_parts_s(trace, gpu)
    return memory / (compute + memory) if compute + memory > 0 else 0.0


def trace_note(trace: TrainTrace | InferTrace, efficiency: float | None = None, calibrated: str = "") -> str:
    """The provenance a traced estimate carries: which code, which torch, which efficiency."""
    eff = "" if efficiency is None else f", efficiency {efficiency:.3g} ({calibrated or 'prior'})"
    return f"traced {trace.digest} (torch {getattr(trace, 'torch_version', '')}{eff})".replace(" ()", "")


def infer_shape(shape: InferShape, trace: InferTrace) -> InferShape:
    """The parametric inference shape with the model config's own figures in place of the catalog's."""
    return replace(shape, layers=trace.layers, kv_heads=trace.kv_heads, head_dim=trace.head_dim,
                   weight_bytes_per_param=trace.weights_bytes / trace.params)  # fmt: skip


def traced_infer_profile(workload: Workload, knobs: Knobs, trace: InferTrace, gpu: GpuModel) -> Profile | None:
    """vLLM's profile of one configuration with the traced model's weights and KV layout."""
    shape = workload.shape
    assert isinstance(shape, InferShape) and workload.kind is JobKind.INFER
    traced = replace(workload, params=trace.params, shape=infer_shape(shape, trace))
    profile = estimators.estimate(traced, knobs, gpu)
    if profile is None:
        return None
    return replace(profile, provenance=trace_note(trace))
