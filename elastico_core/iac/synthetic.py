"""SYNTHETIC co-location samples for training + inference (T+I) and inference + inference (I+I) pairs.

No public dataset measures training co-located with LLM inference, so this module *generates* such
rows from a contention model over the estimated profiles (``rst.estimators``). Every row it writes has
``source = "synthetic"``; figures computed on it are a model's fit to this model, never a measured
accuracy. Replace it with the profiler's ``colocate`` runs as soon as they exist.

Contention model, for job a sharing a GPU of memory C with job b (noise-free)::

    log S(a|b) = sens_a * aggr_b * overlap(a, b)          SM and DRAM demand overlap
               + w_launch * launch_b * [a is inference]   small-kernel storms delay decode steps
               + w_mem * max(0, (fb_a + fb_b) / C - p0)   memory pressure near the ceiling

    overlap(a, b) = (u_a u_b + m_a m_b) / 2,  u = SM active x SM occupancy (SM demand),
                                              m = DRAM active (bandwidth demand)
    sens_a = s_family(a) (1 + phi_pc [a prefix-caches]) (1 + phi_ck [a checkpoints])
    aggr_b = g_family(b) (1 + psi_pc [b prefix-caches]) (1 + psi_ck [b checkpoints])
    launch_b = host_bound / (1 + host_bound) of a training job (share of an iteration on the host)

The per-family sensitivity s and aggressiveness g stand for what the five counters do not capture
(kernel length and launch rate): one pair of values for every inference workload, one per training
family named in Table 6, 1.0 for the others. They and the weights were fitted by least squares in
log space to the 11 T+I and I+I pairs of Table 6 (both sides, 22 targets) on an A100-80GB; the fit
reproduces every decay there within 0.04 and puts each pair in its severity band (``BANDS``).
Generated rows add seeded log-normal measurement noise (``noise``, default 3 %).

Configurations: training knobs are drawn from the workload's Table-2 grid (dp = 1). Inference
memory budgets are Table 2's ``gpu_memory_utilization`` grid read as amounts of an A100-40GB (the
grid's calibration), expressed as a fraction of the GPU used, so two LLMs can share a larger device.
A pair whose memory exceeds C - 512 MiB is written as did-not-fit (``colo_tput = 0`` on both sides).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import polars as pl

from elastico_core.iac.dataset import CoLocationDataset, validate
from elastico_core.model.hardware import GpuModel, gpu_model
from elastico_core.model.knobs import Knobs
from elastico_core.model.profile import Profile
from elastico_core.model.workload import JobKind, TrainShape, Workload
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.estimators import estimate

REFERENCE_MIB = 40960  # Table 2's grids are A100-40GB figures
M_SYS_MIB = 512.0


SENS_TRAIN = {"resnet50": 1.82, "ppo": 2.66, "ncf": 0.21, "bert": 0.21}
AGGR_TRAIN = {"resnet50": 1.79, "ppo": 10.75, "ncf": 0.01, "bert": 0.21}


@dataclass(frozen=True, slots=True)
class ContentionModel:
    """The constants of the module docstring's model (fitted to Table 6, rounded)."""

    sens_infer: float = 0.68
    aggr_infer: float = 0.81
    sens_train: Mapping[str, float] = field(default_factory=lambda: MappingProxyType(SENS_TRAIN))
    aggr_train: Mapping[str, float] = field(default_factory=lambda: MappingProxyType(AGGR_TRAIN))
    phi_pc: float = 0.80  # prefix caching: resident KV blocks + decode-heavy steps make a job fragile
    phi_ck: float = 0.16  # recomputation lengthens the critical path that contention stretches
    psi_pc: float = 0.20
    psi_ck: float = 0.11  # recomputed forward passes are extra SM pressure on the partner
    w_launch: float = 0.31
    w_mem: float = 0.27
    p0: float = 0.6

    def log_slowdown(self, a: Side, b: Side, gpu_mem_mib: float) -> float:
        ca, cb = a.profile.counters, b.profile.counters
        overlap = 0.5 * (ca.sm_active * ca.sm_occupancy * cb.sm_active * cb.sm_occupancy + ca.dram_active * cb.dram_active)
        sens = (self.sens_infer if a.is_infer else self.sens_train.get(a.workload.name, 1.0)) * (1 + self.phi_pc * a.pc) * (1 + self.phi_ck * a.ck)
        aggr = (self.aggr_infer if b.is_infer else self.aggr_train.get(b.workload.name, 1.0)) * (1 + self.psi_pc * b.pc) * (1 + self.psi_ck * b.ck)
        pressure = (ca.fb_used_mb + cb.fb_used_mb) / gpu_mem_mib
        return sens * aggr * overlap + self.w_launch * b.launch * a.is_infer + self.w_mem * max(0.0, pressure - self.p0)

    def slowdown(self, a: Side, b: Side, gpu_mem_mib: float) -> float:
        return math.exp(self.log_slowdown(a, b, gpu_mem_mib))


@dataclass(frozen=True, slots=True)
class Side:
    """One job of a pair: its workload, configuration and estimated profile."""

    workload: Workload
    knobs: Knobs
    profile: Profile

    @property
    def is_infer(self) -> bool:
        return self.workload.kind is JobKind.INFER

    @property
    def pc(self) -> bool:
        return bool(self.knobs.get("prefix_caching", False))

    @property
    def ck(self) -> bool:
        return bool(self.knobs.get("checkpointing", False))

    @property
    def launch(self) -> float:
        shape = self.workload.shape
        return shape.host_bound / (1.0 + shape.host_bound) if isinstance(shape, TrainShape) else 0.0


def side(name: str, gpu: GpuModel, **knobs: object) -> Side:
    """The workload's default configuration with ``knobs`` changed, estimated on ``gpu``.

    Inference without an explicit ``gpu_memory_utilization`` gets its grid's smallest budget (read as
    A100-40GB MiB); training gets dp = 1.
    """
    w = PAPER_WORKLOADS[name]
    changes = dict(knobs)
    if w.kind is JobKind.INFER and "gpu_memory_utilization" not in changes:
        low = min(float(v) for v in w.knob("gpu_memory_utilization").values)  # type: ignore[arg-type]
        changes["gpu_memory_utilization"] = round(low * REFERENCE_MIB / gpu.memory_mib, 3)
    k = w.defaults.with_(**changes)  # type: ignore[arg-type]
    p = estimate(w, k, gpu)
    if p is None:
        raise ValueError(f"{name} {k.short()} cannot run on {gpu.name}")
    return Side(w, k, p)


# ---- Table 6 --------------------------------------------------------------------------------
BANDS: Mapping[str, tuple[float, float]] = MappingProxyType(
    {  # mean decay of the pair (Table 6's groups overlap; §5.3 calls 0.6-0.9 moderate)
        "severe": (0.40, 0.60),
        "high": (0.50, 0.70),
        "moderate": (0.55, 0.90),
        "low": (0.90, 0.97),
        "near-zero": (0.96, 1.00),
    }
)


@dataclass(frozen=True, slots=True)
class NamedPair:
    """A Table 6 row: A / B with their flags (PC prefix caching, CK checkpointing), decays, severity."""

    a: str
    a_flag: str
    b: str
    b_flag: str
    decay_a: float
    decay_b: float
    severity: str

    def sides(self, gpu: GpuModel) -> tuple[Side, Side]:
        return _flagged(self.a, self.a_flag, gpu), _flagged(self.b, self.b_flag, gpu)


def _flagged(name: str, flag: str, gpu: GpuModel) -> Side:
    if PAPER_WORKLOADS[name].kind is JobKind.INFER:
        return side(name, gpu, prefix_caching=flag == "PC")
    return side(name, gpu, checkpointing=flag == "CK")


TABLE6_MIXED: tuple[NamedPair, ...] = (  # the T+I and I+I rows of Table 6 (the generator's scope)
    NamedPair("qwen-1.7b", "PC", "resnet50", "CK", 0.48, 0.55, "severe"),
    NamedPair("deepseek-1.5b", "PC", "resnet50", "CK", 0.50, 0.56, "severe"),
    NamedPair("qwen-1.7b", "PC", "resnet50", "", 0.52, 0.57, "high"),
    NamedPair("qwen-1.7b", "", "resnet50", "CK", 0.66, 0.57, "high"),
    NamedPair("deepseek-1.5b", "", "resnet50", "CK", 0.67, 0.61, "high"),
    NamedPair("qwen-1.7b", "", "resnet50", "", 0.71, 0.68, "moderate"),
    NamedPair("deepseek-1.5b", "", "ppo", "", 0.56, 0.89, "moderate"),
    NamedPair("qwen-1.7b", "PC", "deepseek-1.5b", "PC", 0.60, 0.62, "moderate"),
    NamedPair("llama-3-7b", "PC", "mistral-7b", "PC", 0.58, 0.61, "moderate"),
    NamedPair("qwen-1.7b", "", "ncf", "", 0.93, 0.95, "low"),
    NamedPair("bert", "CK", "deepseek-1.5b", "", 0.95, 0.96, "low"),
)
CALIBRATION_GPU = "a100-80gb"


def named_decays(model: ContentionModel | None = None, gpu: str = CALIBRATION_GPU) -> list[tuple[NamedPair, float, float]]:
    """Noise-free decays (1 / S) the model gives Table 6's T+I and I+I pairs."""
    m, g = model or ContentionModel(), gpu_model(gpu)
    out = []
    for pair in TABLE6_MIXED:
        a, b = pair.sides(g)
        out.append((pair, 1.0 / m.slowdown(a, b, g.memory_mib), 1.0 / m.slowdown(b, a, g.memory_mib)))
    return out


# ---- generator ------------------------------------------------------------------------------
def _random_side(w: Workload, gpu: GpuModel, rng: np.random.Generator) -> Side | None:
    changes: dict[str, object] = {}
    for spec in w.knobs:
        if spec.name == "dp":
            changes["dp"] = 1
        elif spec.name == "gpu_memory_utilization":
            v = float(spec.values[int(rng.integers(len(spec.values)))])  # type: ignore[arg-type]
            changes[spec.name] = round(v * REFERENCE_MIB / gpu.memory_mib, 3)
        else:
            changes[spec.name] = spec.values[int(rng.integers(len(spec.values)))]
    k = Knobs.of(changes)  # type: ignore[arg-type]
    p = estimate(w, k, gpu)
    return None if p is None else Side(w, k, p)


def generate(
    pairs: int,
    *,
    seed: int = 0,
    gpu: str = CALIBRATION_GPU,
    ti_share: float = 0.7,
    noise: float = 0.03,
    model: ContentionModel | None = None,
) -> CoLocationDataset:
    """``pairs`` synthetic rows (T+I with probability ``ti_share``, else I+I), seeded and reproducible."""
    if pairs < 1:
        raise ValueError("pairs must be >= 1")
    m, g = model or ContentionModel(), gpu_model(gpu)
    rng = np.random.default_rng(seed)
    train = [w for w in PAPER_WORKLOADS.values() if w.kind is JobKind.TRAIN]
    infer = [w for w in PAPER_WORKLOADS.values() if w.kind is JobKind.INFER]
    rows: list[dict[str, object]] = []
    while len(rows) < pairs:
        first = train if rng.random() < ti_share else infer
        wa, wb = first[int(rng.integers(len(first)))], infer[int(rng.integers(len(infer)))]
        a, b = _random_side(wa, g, rng), _random_side(wb, g, rng)
        if a is None or b is None:
            continue
        fits = a.profile.counters.fb_used_mb + b.profile.counters.fb_used_mb <= g.memory_mib - M_SYS_MIB
        s_a = s_b = math.inf  # did not fit: co-located throughput 0 on both sides
        if fits:
            s_a = max(1.0, m.slowdown(a, b, g.memory_mib) * math.exp(noise * rng.standard_normal()))
            s_b = max(1.0, m.slowdown(b, a, g.memory_mib) * math.exp(noise * rng.standard_normal()))
        rows.append(
            {
                "gpu": g.name,
                **_side_cols(a, "a", a.profile.throughput / s_a),
                **_side_cols(b, "b", b.profile.throughput / s_b),
                "gpu_mem_mib": float(g.memory_mib),
                "source": "synthetic",
            }
        )
    return validate(pl.DataFrame(rows), origin=f"synthetic(pairs={pairs}, seed={seed}, gpu={g.name})")


def _side_cols(s: Side, x: str, colo: float) -> dict[str, object]:
    c = s.profile.counters
    return {
        f"workload_{x}": s.workload.name,
        f"kind_{x}": s.workload.kind.value,
        f"knobs_{x}": s.knobs.to_json(),
        f"params_{x}": s.workload.params,
        f"solo_tput_{x}": s.profile.throughput,
        f"colo_tput_{x}": colo,
        f"sm_active_{x}": c.sm_active,
        f"sm_occupancy_{x}": c.sm_occupancy,
        f"dram_active_{x}": c.dram_active,
        f"fb_used_mb_{x}": c.fb_used_mb,
        f"tensor_active_{x}": c.tensor_active,
    }
