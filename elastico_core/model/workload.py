"""Workloads: a model family with its knob grid, throughput unit and the shape the estimators need."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from elastico_core.model.errors import SpecError
from elastico_core.model.knobs import TP_KNOB, TP_SIZES, Knobs, KnobSpec, space_size, value_key


class JobKind(StrEnum):
    TRAIN = "train"
    INFER = "infer"


@dataclass(frozen=True, slots=True)
class TrainShape:
    """What the training estimators need to know about a model (first principles + calibration).

    Memory (MiB per GPU) = weights/gradients/optimizer state (``params`` x bytes per parameter)
    + ``runtime_gib`` (CUDA context, cuDNN/cuBLAS workspaces, allocator reserve)
    + ``act_gib_per_sample`` x micro-batch x checkpointing factor x AMP factor.
    Time per iteration = ``launch_ms`` + micro-batch x ``gflops_per_sample`` / achieved FLOP/s.
    """

    gflops_per_sample: float  # forward + backward, ~3x the forward pass
    act_gib_per_sample: float  # activation memory per sample, FP32, no checkpointing
    runtime_gib: float  # everything besides state and activations
    ck_mem_factor: float = 0.45  # activations kept with checkpointing, relative
    ck_time_factor: float = 1.33  # recompute the forward pass (~+1/3 compute)
    amp_mem_factor: float = 0.55  # activations in BF16/FP16 (some stay FP32)
    amp_speedup: float = 1.8  # tensor-core gain on compute time
    launch_ms: float = 8.0  # per-iteration fixed cost: kernel launches, optimizer, data loader
    mfu: float = 0.35  # achieved fraction of peak FLOP/s at saturation
    dram_intensity: float = 0.5  # DRAM-active per SM-active (memory-boundness)
    tensor_share: float = 0.4  # tensor-core share of busy time with AMP
    host_bound: float = 0.0  # share of an iteration spent on the host (RL env steps, embeddings)
    cpu_cores: float = 4.0  # data-loader workers per GPU
    host_mem_gib: float = 16.0
    dp_efficiency: float = 0.9  # per doubling of the data-parallel degree (sub-linear scaling)


@dataclass(frozen=True, slots=True)
class InferShape:
    """What the vLLM estimators need: the transformer's KV layout and the batch's token lengths."""

    layers: int
    kv_heads: int
    head_dim: int
    weight_bytes_per_param: float = 2.0  # BF16 weights
    input_tokens: int = 1024  # mean prompt length of the batch job (ISL)
    output_tokens: int = 256  # mean generated length (OSL)
    prefix_share: float = 0.5  # fraction of prompt tokens shared with earlier prompts (rho)
    activation_gib: float = 1.5  # vLLM's profiled activation peak + CUDA graphs
    cpu_cores: float = 4.0
    host_mem_gib: float = 32.0
    decode_efficiency: float = 0.6  # achieved fraction of HBM bandwidth while decoding


Shape = TrainShape | InferShape


@dataclass(frozen=True, slots=True)
class Workload:
    """A model family that jobs instantiate (Table 2), with its full configuration space."""

    name: str
    kind: JobKind
    params: int  # model parameter count
    knobs: tuple[KnobSpec, ...]
    defaults: Knobs  # the fixed request a static scheduler would run (peak throughput, no tricks)
    shape: Shape
    unit: str = ""
    description: str = ""
    model: str = ""  # a custom training workload's model builder, package.module:function (traced when given)

    def __post_init__(self) -> None:
        where = f"workload {self.name!r}"
        if not self.knobs:
            raise SpecError("empty knob grid", where=where, field="knobs")
        if self.params <= 0:
            raise SpecError(f"must be > 0, got {self.params}", where=where, field="params")
        names = [k.name for k in self.knobs]
        if len(set(names)) != len(names):
            raise SpecError(f"duplicate knob names {names}", where=where, field="knobs")
        if self.kind is JobKind.TRAIN and not isinstance(self.shape, TrainShape):
            raise SpecError("a training workload needs a training shape", where=where, field="shape")
        if self.model and self.kind is not JobKind.TRAIN:
            raise SpecError("a model builder is traced as a training step: only training workloads take one", where=where, field="model")
        if self.kind is JobKind.INFER and not isinstance(self.shape, InferShape):
            raise SpecError("an inference workload needs an inference shape", where=where, field="shape")
        missing = [n for n in names if n not in self.defaults]
        if missing:
            raise SpecError(f"defaults miss knobs {missing}", where=where, field="defaults")
        if not self.unit:
            object.__setattr__(self, "unit", "samples/s" if self.kind is JobKind.TRAIN else "tokens/s")

    def knob(self, name: str) -> KnobSpec:
        for spec in self.knobs:
            if spec.name == name:
                return spec
        raise SpecError(f"unknown knob {name!r} (knobs: {[k.name for k in self.knobs]})", where=f"workload {self.name!r}")

    @property
    def space_size(self) -> int:
        return space_size(self.knobs)

    def off_grid(self, knobs: Knobs) -> str | None:
        """Why ``knobs`` is not one point of this workload's space (None when it is).

        A point names every knob of the grid once, each with a value of its grid; an inference point may
        add vLLM's tensor-parallel degree (2, 4 or 8; 1 is the grid's implicit value). Profile rows off the
        grid describe no configuration the planner can choose, and feeding their figures to the
        estimators' ratios is what turned ``micro_batch`` 0 into a division by zero.
        """
        given = dict(knobs.items)
        for spec in self.knobs:
            if spec.name not in given:
                return f"knob {spec.name} is missing"
            value = given.pop(spec.name)
            if value_key(value) not in {value_key(v) for v in spec.values}:
                return f"{spec.name}={value!r} is outside the grid {list(spec.values)}"
        if self.kind is JobKind.INFER and TP_KNOB in given:
            tp = given.pop(TP_KNOB)
            if isinstance(tp, bool) or tp not in TP_SIZES[1:]:
                return f"{TP_KNOB}={tp!r} is not one of {list(TP_SIZES[1:])}"
        if given:
            return f"unknown knobs {sorted(given)}"
        return None
