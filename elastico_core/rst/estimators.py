"""First-principles estimates of (R, T) for configurations nobody has measured yet (§3.1.2).

Training, per GPU of a data-parallel job of degree d, micro-batch b::

    state   = params x 16 B            (FP32 weights 4 + gradients 4 + Adam moments 8; AMP keeps
                                         FP32 master weights, so state does not shrink)
            + params x 4 B if d > 1     (DDP gradient buckets)
    act     = act_gib_per_sample x b x (ck_mem_factor if checkpointing) x (amp_mem_factor if AMP)
    memory  = state + runtime_gib + act

    t_gpu   = b x t_sample x (ck_time_factor if checkpointing) / (amp_speedup if AMP)
    t_iter  = launch_ms + t_gpu + host_bound x (launch_ms + t_gpu)     (host work does not overlap)
    T       = d x eff^log2(d) x b / t_iter                              (samples/s, sub-linear in d)

where t_sample = gflops_per_sample / (peak x mfu), and on GPUs other than the A100 the compute part
scales with peak FLOP/s and the memory-bound part (``dram_intensity``) with HBM bandwidth.
The per-workload constants are calibrated so that on A100-40GB Table 2's memory ranges and §5.4's
Case 1 hold (see ``rst/catalog.py``).

vLLM offline inference, max_num_seqs B, max_model_len L, gpu_memory_utilization u, prefix caching,
tensor-parallel degree t (the job's GPUs; every figure below is per GPU except T)::

    memory    = u x device memory                      (vLLM pre-allocates it all at start-up, on every GPU)
    kv_pool   = memory - weights / t - activations(L)  (weights = params x 2 B, sharded over the t GPUs;
                                                        activations grow with the prefill token budget L)
    kv/token  = 2 x layers x max(1, kv_heads / t) x head_dim x 2 B   (KV heads are sharded, or replicated
                                                                      when there are fewer than t)
    tokens/request = min(ISL + OSL, L); concurrency c = min(B, kv_pool / (tokens/request x kv/token))
    decode step     = (weights / t + c x context x kv/token) / (bandwidth x decode_efficiency) + 1.5 ms
                      + 2 x layers x 12 us x log2(t)   (two all-reduces per layer over NVLink)
    prefill/request = 2 x params x ISL x (1 - rho if prefix caching) / (t x 0.9^log2(t) x bf16 peak x 0.45)
    T = OSL / (OSL x step / c + prefill)              (generated tokens/s of the whole job)

A configuration whose KV pool cannot hold one full sequence of length L is infeasible (vLLM refuses
to start), and so is one whose memory exceeds the device; ``estimate`` returns None for those.
"""

from __future__ import annotations

import math

from elastico_core.model.hardware import KNOWN_GPUS, GpuModel, HardwareSignature
from elastico_core.model.job import DP_KNOB
from elastico_core.model.knobs import TP_KNOB, Knobs
from elastico_core.model.profile import Counters, Profile, Source
from elastico_core.model.resources import ResourceVector
from elastico_core.model.workload import InferShape, JobKind, TrainShape, Workload

GIB = 1024.0  # MiB per GiB
REFERENCE_GPU = KNOWN_GPUS["a100-40gb"]
STATE_BYTES_PER_PARAM = 16.0
DDP_BUCKET_BYTES_PER_PARAM = 4.0


def state_gib(params: int, dp: int) -> float:
    per_param = STATE_BYTES_PER_PARAM + (DDP_BUCKET_BYTES_PER_PARAM if dp > 1 else 0.0)
    return params * per_param / 2**30


def train_memory_gib(shape: TrainShape, params: int, batch: int, ck: bool, amp: bool, dp: int = 1) -> float:
    act = shape.act_gib_per_sample * batch
    if ck:
        act *= shape.ck_mem_factor
    if amp:
        act *= shape.amp_mem_factor
    return state_gib(params, dp) + shape.runtime_gib + act


def _sample_seconds(shape: TrainShape, gpu: GpuModel, amp: bool) -> float:
    """GPU seconds per sample on ``gpu``: compute part scales with FLOP/s, memory part with bandwidth."""
    ref = shape.gflops_per_sample * 1e9 / (REFERENCE_GPU.fp32_tflops * 1e12 * shape.mfu)
    peak_ratio = (REFERENCE_GPU.bf16_tflops / gpu.bf16_tflops) if amp else (REFERENCE_GPU.fp32_tflops / gpu.fp32_tflops)
    bw_ratio = REFERENCE_GPU.mem_bw_gbs / gpu.mem_bw_gbs
    scale = (1.0 - shape.dram_intensity / 2) * peak_ratio + (shape.dram_intensity / 2) * bw_ratio
    seconds = ref * scale
    return seconds / shape.amp_speedup if amp else seconds


def estimate_train(workload: Workload, knobs: Knobs, gpu: GpuModel) -> Profile:
    shape = workload.shape
    assert isinstance(shape, TrainShape)
    batch = int(knobs["micro_batch"])
    ck = bool(knobs.get("checkpointing", False))
    amp = bool(knobs.get("amp", False))
    dp = int(knobs.get(DP_KNOB, 1) or 1)
    mem_gib = train_memory_gib(shape, workload.params, batch, ck, amp, dp)
    t_gpu = batch * _sample_seconds(shape, gpu, amp) * (shape.ck_time_factor if ck else 1.0)
    launch = shape.launch_ms / 1e3
    t_iter = (launch + t_gpu) * (1.0 + shape.host_bound)
    scaling = dp * shape.dp_efficiency ** math.log2(dp) if dp > 1 else 1.0
    throughput = scaling * batch / t_iter
    busy = t_gpu / t_iter
    occupancy = min(0.95, 0.25 + 0.6 * batch / (batch + 4.0 * _half_batch(workload)))
    sm_active = min(0.99, busy + 0.05 * (1 - busy))
    counters = Counters(
        sm_active=sm_active,
        sm_occupancy=occupancy,
        dram_active=min(0.95, sm_active * shape.dram_intensity),
        fb_used_mb=mem_gib * GIB,
        tensor_active=sm_active * shape.tensor_share * (1.0 if amp else 0.35),
    )
    resources = ResourceVector(
        sm=round(min(1.0, sm_active * occupancy), 4),
        gpu_mem_mib=round(mem_gib * GIB, 1),
        cpu_cores=shape.cpu_cores,
        host_mem_mib=shape.host_mem_gib * GIB,
    )
    return Profile(
        workload=workload.name,
        knobs=knobs,
        signature=HardwareSignature.estimated(gpu),
        resources=resources,
        throughput=throughput,
        unit=workload.unit,
        source=Source.ESTIMATED,
        counters=counters,
    )


def _half_batch(workload: Workload) -> float:
    """The micro-batch at which a model reaches half its occupancy: the middle of its grid."""
    grid = [int(v) for v in workload.knob("micro_batch").values]
    return math.sqrt(grid[0] * grid[-1]) / 4.0


def kv_bytes_per_token(shape: InferShape) -> float:
    return 2.0 * shape.layers * shape.kv_heads * shape.head_dim * 2.0


def infer_activation_gib(shape: InferShape, max_model_len: int) -> float:
    """vLLM profiles a forward pass of ``max_num_batched_tokens`` (~L) tokens at start-up."""
    return shape.activation_gib * (0.6 + 0.4 * max_model_len / 8192.0)


def estimate_infer(workload: Workload, knobs: Knobs, gpu: GpuModel) -> Profile | None:
    shape = workload.shape
    assert isinstance(shape, InferShape)
    seqs = int(knobs["max_num_seqs"])
    max_len = int(knobs["max_model_len"])
    util = float(knobs["gpu_memory_utilization"])
    prefix = bool(knobs.get("prefix_caching", False))
    tp = int(knobs.get(TP_KNOB, 1) or 1)

    mem_bytes = util * gpu.memory_mib * 2**20
    weights = workload.params * shape.weight_bytes_per_param / tp  # per GPU
    act = infer_activation_gib(shape, max_len) * 2**30
    pool = mem_bytes - weights - act
    if prefix:
        pool *= 0.9  # cached prefix blocks stay resident (§3.1.1: higher baseline occupancy)
    per_token = kv_bytes_per_token(shape) * max(1.0 / tp, 1.0 / shape.kv_heads)  # per GPU
    if pool < max_len * per_token:
        return None  # vLLM: the KV cache cannot hold one max_model_len sequence
    tokens_per_request = min(shape.input_tokens + shape.output_tokens, max_len)
    isl = max(1, tokens_per_request - shape.output_tokens)
    osl = min(shape.output_tokens, tokens_per_request)
    concurrency = min(float(seqs), pool / (tokens_per_request * per_token))
    context = isl + osl / 2.0
    step = (weights + concurrency * context * per_token) / (gpu.mem_bw_gbs * 1e9 * shape.decode_efficiency) + 1.5e-3
    step += 2 * shape.layers * 12e-6 * math.log2(tp)  # tensor-parallel all-reduces
    tp_scale = tp * 0.9 ** math.log2(tp)
    reuse = shape.prefix_share if prefix else 0.0
    chunk_overhead = 1.0 + 1024.0 / max_len  # smaller prefill budgets split prompts into more steps
    prefill = 2.0 * workload.params * isl * (1.0 - reuse) * chunk_overhead / (tp_scale * gpu.bf16_tflops * 1e12 * 0.45)
    per_request = osl * step / concurrency + prefill
    throughput = osl / per_request

    decode_share = (osl * step / concurrency) / per_request
    sm_active = min(0.95, 0.55 + 0.1 * concurrency)
    occupancy = min(0.9, (0.12 + 0.06 * concurrency) * decode_share + 0.7 * (1 - decode_share))
    counters = Counters(
        sm_active=sm_active,
        sm_occupancy=occupancy,
        dram_active=min(0.95, 0.45 + 0.4 * decode_share),
        fb_used_mb=mem_bytes / 2**20,
        tensor_active=min(0.9, 0.08 + 0.5 * (1 - decode_share) + 0.02 * concurrency),
    )
    resources = ResourceVector(
        sm=round(min(1.0, sm_active * occupancy * 1.5), 4),
        gpu_mem_mib=round(util * gpu.memory_mib, 1),
        cpu_cores=shape.cpu_cores,
        host_mem_mib=shape.host_mem_gib * GIB,
    )
    return Profile(
        workload=workload.name,
        knobs=knobs,
        signature=HardwareSignature.estimated(gpu),
        resources=resources,
        throughput=throughput,
        unit=workload.unit,
        source=Source.ESTIMATED,
        counters=counters,
    )


def memory_need_mib(workload: Workload, knobs: Knobs, gpu: GpuModel) -> float | None:
    """GPU memory one GPU of a configuration needs, also where ``estimate`` says it cannot run on ``gpu`` —
    so that a job none of whose configurations runs is told the memory it lacks, not a throughput of 0.

    Training: the estimate's own figure. Inference: what vLLM must hold besides its KV pool — the weights
    and activations — plus one ``max_model_len`` sequence of KV cache, all per GPU.
    """
    if workload.kind is JobKind.TRAIN:
        profile = estimate_train(workload, knobs, gpu)
        return None if profile is None else profile.resources.gpu_mem_mib
    shape = workload.shape
    if not isinstance(shape, InferShape):
        return None
    tp = int(knobs.get(TP_KNOB, 1) or 1)
    max_len = int(knobs["max_model_len"])
    per_token = kv_bytes_per_token(shape) * max(1.0 / tp, 1.0 / shape.kv_heads)
    kv = max_len * per_token / (0.9 if bool(knobs.get("prefix_caching", False)) else 1.0)
    need = workload.params * shape.weight_bytes_per_param / tp + infer_activation_gib(shape, max_len) * 2**30 + kv
    return float(need / 2**20)


def estimate(workload: Workload, knobs: Knobs, gpu: GpuModel) -> Profile | None:
    """The estimated profile of one configuration, or None where it cannot run on ``gpu`` at all."""
    profile = estimate_train(workload, knobs, gpu) if workload.kind is JobKind.TRAIN else estimate_infer(workload, knobs, gpu)
    if profile is None or profile.resources.gpu_mem_mib > gpu.memory_mib:
        return None
    return profile
