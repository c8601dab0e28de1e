"""Sweeps of §5.6 and §5.2: cluster scale (Table 8), arrival rate, and the GPUs each policy needs.

* **Scale**: ``builtin:paper-mix`` is regenerated for each cluster size (arrival rate proportional to
  GPUs); a trace file is replayed unchanged on every size.
* **Load**: the paper-mix arrival rates times 0.5 / 1.0 / 1.5 at one size; a trace file is compressed
  in time (submit times divided by the load factor).
* **GPUs needed**: the trace generated for ``base_gpus`` is replayed on smaller and larger clusters
  (the CLI tries multiples of 8 from 0.5x to 1.5x ``base_gpus``, binary search assuming more GPUs
  never hurt; a run stops at the target makespan); a policy "serves the mix" on G GPUs
  when every job finishes, attainment >= ``min_attainment`` and the makespan is at most
  ``makespan_factor`` x the trace's ideal makespan (every job starting on arrival at its default
  configuration). This is the §5.2 "GPU instances required for a given workload mix".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.metrics import PolicyMetrics
from elastico_core.sim.paper_mix import PaperMixConfig, paper_mix
from elastico_core.sim.policy import PolicyKind
from elastico_core.sim.report import ScalingRow
from elastico_core.sim.runner import Progress, RunSpec, baseline_of, run_policies, summarize_all
from elastico_core.sim.trace import Trace

TraceFactory = Callable[[int, float], Trace]  # (gpus, load) -> trace


def builtin_factory(seed: int, store: ProfileStore, data_dir: Path | None, hours: float = 24.0) -> TraceFactory:
    def make(gpus: int, load: float) -> Trace:
        return paper_mix(seed, PaperMixConfig(gpus=gpus, hours=hours, load=load), store=store, data_dir=data_dir)

    return make


def file_factory(trace: Trace) -> TraceFactory:
    def make(gpus: int, load: float) -> Trace:
        if load == 1.0:
            return trace
        jobs = tuple(replace(j, submit_time_s=j.submit_time_s / load) for j in trace.jobs)
        return Trace(f"{trace.name}@{load:g}x", jobs, trace.notes)

    return make


def _row(
    factory: TraceFactory, gpus: int, load: float, kinds: Sequence[PolicyKind], spec: RunSpec, store: ProfileStore,
    predictor: SlowdownPredictor | None, progress: Progress | None,
) -> ScalingRow:
    trace = factory(gpus, load)
    results = run_policies(trace, kinds, replace(spec, gpus=gpus), store=store, predictor=predictor, progress=progress)
    metrics = summarize_all(results)
    base = metrics[baseline_of(kinds)]
    return ScalingRow(gpus, load, base, {k.value: m for k, m in metrics.items()})


def scale_sweep(
    factory: TraceFactory, gpus: Sequence[int], kinds: Sequence[PolicyKind], spec: RunSpec, *, store: ProfileStore,
    predictor: SlowdownPredictor | None = None, progress: Progress | None = None,
) -> list[ScalingRow]:
    return [_row(factory, g, 1.0, kinds, spec, store, predictor, progress) for g in gpus]


def load_sweep(
    factory: TraceFactory, gpus: int, loads: Sequence[float], kinds: Sequence[PolicyKind], spec: RunSpec, *,
    store: ProfileStore, predictor: SlowdownPredictor | None = None, progress: Progress | None = None,
) -> list[ScalingRow]:
    return [_row(factory, gpus, ld, kinds, spec, store, predictor, progress) for ld in loads]


@dataclass(frozen=True, slots=True)
class ServeTarget:
    min_attainment: float = 0.98
    makespan_factor: float = 1.25

    def describe(self) -> str:
        return (f"Serving = every job finishes, attainment >= {100 * self.min_attainment:.0f} %, makespan <= "
                f"{self.makespan_factor:g} x the ideal makespan (all jobs start on arrival at their default configuration).")


def ideal_makespan(trace: Trace) -> float:
    return max((j.submit_time_s + j.duration_s for j in trace.jobs), default=0.0)


def serves(m: PolicyMetrics, trace: Trace, target: ServeTarget) -> bool:
    return (
        m.jobs_finished == m.jobs_total
        and m.attainment >= target.min_attainment - 1e-9
        and m.makespan_s <= target.makespan_factor * ideal_makespan(trace) + 1e-6
    )


def gpus_needed(
    trace: Trace, kind: PolicyKind, spec: RunSpec, *, store: ProfileStore, candidates: Sequence[int],
    target: ServeTarget = ServeTarget(), predictor: SlowdownPredictor | None = None, progress: Progress | None = None,
) -> int | None:
    """The smallest candidate cluster size on which ``kind`` serves ``trace`` (None: not even the largest)."""
    sizes = sorted(set(candidates))
    lo, hi = 0, len(sizes) - 1
    best: int | None = None
    # a run fails once a job is unfinished at the target makespan: stop it there (overloaded clusters
    # would otherwise simulate a long backlog for nothing)
    limit = replace(spec.config, max_time_s=target.makespan_factor * ideal_makespan(trace) + 1.0)
    while lo <= hi:
        mid = (lo + hi) // 2
        g = sizes[mid]
        run = replace(spec, gpus=g, config=limit)
        m = summarize_all(run_policies(trace, [kind], run, store=store, predictor=predictor, progress=progress))[kind]
        if serves(m, trace, target):
            best = g
            hi = mid - 1
        else:
            lo = mid + 1
    return best
