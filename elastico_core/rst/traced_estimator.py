"""The estimator the profile store falls back to: traced figures where a current trace exists, else parametric.

For a training configuration with a trace in ``<profiles>/traced`` the estimate is ``from_trace``'s
(memory by construction, throughput by roofline at the efficiency calibrated for the workload family
and GPU model, or the prior); for an inference workload with a traced model config, vLLM's estimate
with the config's own weights and KV layout; for anything else (a custom workload without a model
builder, a workload nobody traced) the parametric estimate of ``rst.estimators``. Every estimate says
which in its ``provenance``: ``traced <digest> ...`` or empty (parametric).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from elastico_core.model.errors import SpecError
from elastico_core.model.hardware import GpuModel, gpu_model
from elastico_core.model.job import DP_KNOB
from elastico_core.model.knobs import Knobs
from elastico_core.model.profile import Profile
from elastico_core.model.traced import TrainTrace
from elastico_core.model.workload import JobKind, Workload
from elastico_core.rst.efficiency import Efficiencies, TracedObservation, read_efficiencies
from elastico_core.rst.estimators import estimate
from elastico_core.rst.from_trace import (
    PRIOR_EFFICIENCY,
    trace_note,
    traced_infer_profile,
    traced_train_profile,
    train_memory_mib,
    train_throughput,
)
from elastico_core.rst.traced import TracedCache

SCALE = "full"  # the scale jobs run at on GPUs


def train_trace_for(cache: TracedCache, workload: Workload, knobs: Knobs) -> TrainTrace | None:
    if workload.kind is not JobKind.TRAIN or "micro_batch" not in knobs:
        return None
    return cache.train_trace(workload.name, int(knobs["micro_batch"]), bool(knobs.get("checkpointing", False)),
                             bool(knobs.get("amp", False)), scale=SCALE)  # fmt: skip


@dataclass
class TracedEstimator:
    """``(workload, knobs, gpu) -> Profile | None`` as ``rst.estimators.estimate``, traced where it can be."""

    cache: TracedCache
    problems: list[SpecError] = field(default_factory=list)
    _efficiencies: dict[str, Efficiencies] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, root: Path) -> TracedEstimator:
        return cls(TracedCache(root))

    def efficiencies(self) -> dict[str, Efficiencies]:
        if self._efficiencies is None:
            try:
                self._efficiencies = read_efficiencies(self.cache.folder)
            except SpecError as exc:  # a damaged file: the prior efficiency stands, and it is said
                self.problems.append(exc)
                self._efficiencies = {}
        return self._efficiencies

    def efficiency(self, workload: str, gpu: GpuModel) -> tuple[float, str]:
        fitted = self.efficiencies().get(gpu.name)
        if fitted is None:
            return PRIOR_EFFICIENCY, ""
        return fitted.efficiency(workload), f"calibrated on {fitted.rows} {gpu.name} rows"

    def __call__(self, workload: Workload, knobs: Knobs, gpu: GpuModel) -> Profile | None:
        trace = train_trace_for(self.cache, workload, knobs)
        if trace is not None:
            eff, how = self.efficiency(workload.name, gpu)
            return traced_train_profile(workload, knobs, trace, gpu, eff, trace_note(trace, eff, how))
        if workload.kind is JobKind.INFER:
            infer = self.cache.infer_trace(workload.name)
            if infer is not None:
                return traced_infer_profile(workload, knobs, infer, gpu)
        return estimate(workload, knobs, gpu)


def traced_observations(
    measured: Iterable[Profile], workloads: Mapping[str, Workload], cache: TracedCache
) -> tuple[list[TracedObservation], list[str]]:
    """Measured training rows beside their traced estimates at the prior efficiency; the rest named as skipped."""
    obs, skipped = [], []
    for p in measured:
        where = f"{p.workload} {p.knobs.to_json()} on {p.signature.key}"
        w = workloads.get(p.workload)
        if w is None:
            skipped.append(f"{where}: not a catalog workload")
            continue
        trace = train_trace_for(cache, w, p.knobs)
        if trace is None:
            skipped.append(f"{where}: no trace (run 'elastico profiles trace')")
            continue
        try:
            gpu = gpu_model(p.signature.gpu)
        except SpecError:
            skipped.append(f"{where}: no datasheet for {p.signature.gpu!r}")
            continue
        dp = int(p.knobs.get(DP_KNOB, 1) or 1)
        shape_dp = getattr(w.shape, "dp_efficiency", 0.9)
        est_t = train_throughput(trace, gpu, dp, shape_dp, PRIOR_EFFICIENCY)
        est_m = train_memory_mib(trace, gpu, dp)
        values = (p.throughput, p.resources.gpu_mem_mib, est_t, est_m)
        if not all(math.isfinite(v) and v > 0 for v in values):
            skipped.append(f"{where}: a throughput or memory figure is not a positive number")
            continue
        obs.append(TracedObservation(w.name, p.knobs.to_json(), gpu.name, *values, trace))
    return obs, skipped
