"""The 12 workloads of Table 2, with exactly its knob grids, calibrated to its memory ranges.

Training grids: micro-batch sizes in powers of two, activation checkpointing +/-, AMP +/-, plus the
data-parallel degree 1/2/4/8 (DESIGN.md, open points; a job's ``gpus`` caps it).
Inference grids: max_num_seqs (BS), max_model_len (SL), prefix caching +/-, and
gpu_memory_utilization (MU) in steps of 0.05.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from elastico_core.model.errors import SpecError
from elastico_core.model.knobs import ChangeKind, Knobs, KnobSpec
from elastico_core.model.workload import InferShape, JobKind, TrainShape, Workload
from elastico_core.rst.estimators import state_gib

DP_VALUES = (1, 2, 4, 8)


def powers_of_two(lo: int, hi: int) -> tuple[int, ...]:
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return tuple(out)


def mu_grid(lo: float, hi: float) -> tuple[float, ...]:
    steps = round((hi - lo) / 0.05)
    return tuple(round(lo + 0.05 * i, 2) for i in range(steps + 1))


def train_knobs(batches: tuple[int, ...]) -> tuple[KnobSpec, ...]:
    return (
        KnobSpec("micro_batch", batches, ChangeKind.CHECKPOINT_RESUME, "samples per GPU per iteration"),
        KnobSpec("checkpointing", (False, True), ChangeKind.CHECKPOINT_RESUME, "activation recomputation"),
        KnobSpec("amp", (False, True), ChangeKind.CHECKPOINT_RESUME, "automatic mixed precision (BF16)"),
        KnobSpec("dp", DP_VALUES, ChangeKind.CHECKPOINT_RESUME, "data-parallel degree (GPUs)"),
    )


def infer_knobs(lengths: tuple[int, ...], mu: tuple[float, ...]) -> tuple[KnobSpec, ...]:
    return (
        KnobSpec("max_num_seqs", (1, 2, 4), ChangeKind.ENGINE_RESTART, "vLLM continuous-batching width B_max"),
        KnobSpec("max_model_len", lengths, ChangeKind.ENGINE_RESTART, "vLLM maximum sequence length L_max"),
        KnobSpec("prefix_caching", (False, True), ChangeKind.FLAG_TOGGLE, "vLLM enable_prefix_caching"),
        KnobSpec("gpu_memory_utilization", mu, ChangeKind.ENGINE_RESTART, "vLLM pre-allocated device fraction"),
    )


@dataclass(frozen=True, slots=True)
class MemoryAnchors:
    """Table 2's memory range on A100-40GB, plus §5.4 Case 1 figures where the paper gives them."""

    min_gib: float  # smallest micro-batch, checkpointing and AMP on
    max_gib: float  # largest micro-batch, both off (the default configuration)
    amp_gib: float | None = None  # largest micro-batch with AMP only (ResNet-50: 24 -> 14)
    ck_gib: float | None = None  # largest micro-batch with checkpointing only (BERT: 36 -> 24)


def fit_train_shape(shape: TrainShape, params: int, batches: tuple[int, ...], anchors: MemoryAnchors) -> TrainShape:
    """Solve activation memory per sample and runtime reserve from the anchors.

    With X = activation GiB at the largest micro-batch and r = smallest / largest micro-batch:
    ``max = state + runtime + X`` and ``min = state + runtime + X r k_ck k_amp``. An AMP anchor fixes
    k_amp = 1 - (max - amp)/X, a checkpointing anchor fixes X = (max - ck)/(1 - k_ck) exactly (Case 1
    takes precedence over the Table-2 minimum, which then lands within a GiB).
    """
    r = batches[0] / batches[-1]
    k_ck, k_amp = shape.ck_mem_factor, shape.amp_mem_factor
    delta = anchors.max_gib - anchors.min_gib
    if anchors.amp_gib is not None:
        d = anchors.max_gib - anchors.amp_gib
        x = (delta - r * k_ck * d) / (1 - r * k_ck)
        k_amp = 1 - d / x
    elif anchors.ck_gib is not None:
        x = (anchors.max_gib - anchors.ck_gib) / (1 - k_ck)
    else:
        x = delta / (1 - r * k_ck * k_amp)
    runtime = anchors.max_gib - x - state_gib(params, 1)
    if runtime < 0.5:
        raise SpecError(
            f"[{anchors.min_gib:g}, {anchors.max_gib:g}] GiB cannot be met: the activations it implies leave "
            f"{runtime:.2f} GiB for the framework's runtime beside {params:,} parameters (at least 0.5 GiB); "
            "narrow the range or check params")
    if not 0 < k_amp <= 1:
        raise SpecError(f"[{anchors.min_gib:g}, {anchors.max_gib:g}] GiB cannot be met: the AMP anchor "
                        f"{anchors.amp_gib:g} GiB would need AMP to save {100 * (1 - k_amp):.0f}% of the activations")
    return replace(shape, act_gib_per_sample=x / batches[-1], runtime_gib=runtime, amp_mem_factor=k_amp)


def _train(
    name: str,
    params: int,
    batches: tuple[int, ...],
    anchors: MemoryAnchors,
    shape: TrainShape,
    description: str,
) -> Workload:
    fitted = fit_train_shape(shape, params, batches, anchors)
    defaults = Knobs.of({"micro_batch": batches[-1], "checkpointing": False, "amp": False, "dp": 1})
    return Workload(name, JobKind.TRAIN, params, train_knobs(batches), defaults, fitted, "samples/s", description)


def _infer(
    name: str, params: int, lengths: tuple[int, ...], mu: tuple[float, ...], shape: InferShape, description: str
) -> Workload:
    defaults = Knobs.of(
        {"max_num_seqs": 4, "max_model_len": lengths[-1], "prefix_caching": False, "gpu_memory_utilization": mu[-1]}
    )
    return Workload(name, JobKind.INFER, params, infer_knobs(lengths, mu), defaults, shape, "tokens/s", description)


def _shape(**kw: float) -> TrainShape:
    return TrainShape(act_gib_per_sample=0.0, runtime_gib=0.0, **kw)  # type: ignore[arg-type]


def paper_workloads() -> Mapping[str, Workload]:
    """Table 2. Throughput constants give realistic A100 figures (ResNet-50 ~1.2k img/s in TF32)."""
    small = powers_of_two(32, 512)
    ws = [
        _train("resnet50", 25_557_032, small, MemoryAnchors(12, 24, amp_gib=14),
               _shape(gflops_per_sample=12.3, mfu=0.10, launch_ms=6, amp_speedup=2.0, dram_intensity=0.4,
                      tensor_share=0.5, cpu_cores=8), "ResNet-50, ImageNet 224x224"),
        _train("bert", 335_141_888, powers_of_two(32, 128), MemoryAnchors(24, 36, ck_gib=24),
               _shape(gflops_per_sample=258.0, mfu=0.5, launch_ms=10, amp_speedup=2.2, dram_intensity=0.35,
                      tensor_share=0.7, ck_mem_factor=0.08, cpu_cores=4), "BERT-Large, sequence length 128"),
        _train("dcgan", 6_400_000, small, MemoryAnchors(8, 16),
               _shape(gflops_per_sample=2.6, mfu=0.15, launch_ms=4, amp_speedup=1.6, dram_intensity=0.5,
                      tensor_share=0.4, cpu_cores=4), "DCGAN, 64x64 images"),
        _train("pointnet", 3_500_000, small, MemoryAnchors(12, 20),
               _shape(gflops_per_sample=2.7, mfu=0.10, launch_ms=5, amp_speedup=1.5, dram_intensity=0.55,
                      tensor_share=0.3, cpu_cores=4), "PointNet, ModelNet40 classification"),
        _train("transformer", 65_000_000, small, MemoryAnchors(20, 38),
               _shape(gflops_per_sample=23.0, mfu=0.35, launch_ms=8, amp_speedup=2.0, dram_intensity=0.35,
                      tensor_share=0.6, ck_mem_factor=0.15, cpu_cores=4), "Transformer-base, WMT translation"),
        _train("lstm", 66_000_000, powers_of_two(32, 4096), MemoryAnchors(4, 12),
               _shape(gflops_per_sample=14.0, mfu=0.2, launch_ms=15, amp_speedup=1.3, dram_intensity=0.7,
                      tensor_share=0.3, ck_mem_factor=0.5, cpu_cores=2), "2-layer LSTM language model"),
        _train("ncf", 31_000_000, powers_of_two(32, 8192), MemoryAnchors(4, 16),
               _shape(gflops_per_sample=0.01, mfu=0.05, launch_ms=3, amp_speedup=1.2, dram_intensity=0.85,
                      tensor_share=0.2, host_bound=0.3, ck_mem_factor=0.6, cpu_cores=4),
               "NCF-NeuMF recommendation, MovieLens-20M"),
        _train("ppo", 1_200_000, powers_of_two(32, 4096), MemoryAnchors(8, 24),
               _shape(gflops_per_sample=0.003, mfu=0.05, launch_ms=4, amp_speedup=1.1, dram_intensity=0.5,
                      tensor_share=0.1, host_bound=1.5, ck_mem_factor=0.6, cpu_cores=8, host_mem_gib=24),
               "PPO on vectorised environments (samples = environment steps)"),
        _infer("deepseek-1.5b", 1_777_088_000, (4096, 8192, 16384), mu_grid(0.4, 0.9),
               InferShape(layers=28, kv_heads=2, head_dim=128), "DeepSeek-R1-Distill-Qwen-1.5B, vLLM"),
        _infer("qwen-1.7b", 2_031_739_904, (4096, 8192, 16384), mu_grid(0.4, 0.9),
               InferShape(layers=28, kv_heads=8, head_dim=128), "Qwen3-1.7B, vLLM"),
        _infer("mistral-7b", 7_241_732_096, (1024, 2048, 4096), mu_grid(0.7, 0.9),
               InferShape(layers=32, kv_heads=8, head_dim=128, input_tokens=768, output_tokens=256),
               "Mistral-7B-v0.1, vLLM"),
        _infer("llama-3-7b", 8_030_261_248, (1024, 2048, 4096), mu_grid(0.7, 0.9),
               InferShape(layers=32, kv_heads=8, head_dim=128, input_tokens=768, output_tokens=256),
               "Llama-3-8B, vLLM"),
    ]
    return MappingProxyType({w.name: w for w in ws})


PAPER_WORKLOADS: Mapping[str, Workload] = paper_workloads()
