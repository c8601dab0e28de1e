"""Run several policies over one trace and cluster, and turn the results into the comparison document."""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from elastico_core.bench.instances import make_cluster
from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.model.cluster import Cluster
from elastico_core.model.errors import SpecError
from elastico_core.rst.store import ProfileStore
from elastico_core.sim import BUILTIN, PHILLY
from elastico_core.sim.metrics import PolicyMetrics, normalised, summarize
from elastico_core.sim.policy import PolicyContext, PolicyFactory, PolicyKind, Registry
from elastico_core.sim.registry import default_registry
from elastico_core.sim.result import SimResult
from elastico_core.sim.simulator import SimConfig, simulate
from elastico_core.sim.trace import Trace
from elastico_core.sim.truth import ContentionPredictor, PredictorKind, TruthKind, make_predictor, make_truth

Progress = Callable[[PolicyKind], Callable[[float], None] | None]


@dataclass(frozen=True, slots=True)
class RunSpec:
    """Everything that determines a comparison besides the trace: the knobs ``--json`` output depends on."""

    gpus: int
    seed: int = 0
    gpu: str = "a100-40gb"
    truth: TruthKind = TruthKind.CONTENTION
    config: SimConfig = field(default_factory=SimConfig)


def cluster_for(gpus: int, gpu: str = "a100-40gb") -> Cluster:
    """Nodes of 8 GPUs (the paper's testbed shape); ``gpus`` must be >= 1."""
    if gpus < 1:
        raise SpecError(f"a cluster needs at least one GPU, got {gpus}", field="gpus")
    return make_cluster(gpus, gpu=gpu, name=f"sim-{gpus}")


def run_policies(
    trace: Trace,
    kinds: Sequence[PolicyKind],
    spec: RunSpec,
    *,
    store: ProfileStore,
    predictor: SlowdownPredictor | None = None,
    registry: Registry[PolicyKind, PolicyFactory] | None = None,
    progress: Progress | None = None,
) -> dict[PolicyKind, SimResult]:
    """One simulation per policy, each with a fresh policy and a fresh ground truth of the same seed."""
    reg = registry or default_registry()
    cluster = cluster_for(spec.gpus, spec.gpu)
    ctx = PolicyContext(store, predictor or ContentionPredictor(), spec.seed)
    out: dict[PolicyKind, SimResult] = {}
    for kind in kinds:
        policy = reg.get(kind)(ctx)
        out[kind] = simulate(
            trace, policy, cluster, spec.seed, store=store, truth=make_truth(spec.truth, spec.seed),
            config=spec.config, progress=progress(kind) if progress else None,
        )
    return out


def baseline_of(kinds: Sequence[PolicyKind]) -> PolicyKind:
    """Volcano-like when it ran, else the first policy."""
    return PolicyKind.VOLCANO if PolicyKind.VOLCANO in kinds else kinds[0]


def comparison(metrics: Mapping[PolicyKind, PolicyMetrics], baseline: PolicyKind) -> dict[str, object]:
    """The ``--json`` document: ``{"policies": {name: {headline keys}}, "baseline": name}``."""
    return {"policies": {k.value: m.headline() for k, m in metrics.items()}, "baseline": baseline.value}


def full_metrics(metrics: Mapping[PolicyKind, PolicyMetrics], baseline: PolicyKind, meta: Mapping[str, object]) -> dict[str, object]:
    """``metrics.json``: every metric, the ratios to the baseline, and how the run was made."""
    base = metrics[baseline]
    return {
        "baseline": baseline.value,
        "run": dict(meta),
        "policies": {
            k.value: {**m.as_json(), "vs_baseline": {n: round(v, 6) if math.isfinite(v) else None for n, v in normalised(m, base).items()}}
            for k, m in metrics.items()
        },
    }


def summarize_all(results: Mapping[PolicyKind, SimResult]) -> dict[PolicyKind, PolicyMetrics]:
    return {k: summarize(r) for k, r in results.items()}


@dataclass(frozen=True, slots=True)
class TraceSource:
    """Where a comparison's trace comes from: a CSV path, ``builtin:paper-mix`` or ``philly:PATH``.

    A value rather than a loaded trace, so that a worker process can build each seed's trace itself.
    """

    name: str
    gpus: int
    hours: float = 24.0
    load: float = 1.0
    data_dir: Path | None = None  # public data (request sizes, Azure token counts) for paper-mix

    def trace(self, seed: int, store: ProfileStore) -> Trace:
        from elastico_core.sim.paper_mix import PaperMixConfig, paper_mix
        from elastico_core.sim.philly import import_philly
        from elastico_core.sim.trace import load_trace

        if self.name == BUILTIN:
            return paper_mix(seed, PaperMixConfig(gpus=self.gpus, hours=self.hours, load=self.load), store=store, data_dir=self.data_dir)
        if self.name.startswith(PHILLY):
            if not 0 < self.load <= 1:
                raise SpecError("for a philly: trace --load is the fraction of jobs kept, in (0, 1]", field="load")
            return import_philly(Path(self.name[len(PHILLY):]), seed=seed, hours=self.hours, sample=self.load)
        if self.name.startswith("builtin:"):
            raise SpecError(f"unknown built-in trace {self.name!r} (known: {BUILTIN})", field="trace")
        return load_trace(Path(self.name), seed=seed)

    def span_hint_s(self, store: ProfileStore) -> float:
        """About how long the trace submits for (what a progress bar counts to), without generating it."""
        if self.name == BUILTIN or self.name.startswith(PHILLY):
            return self.hours * 3600.0
        return self.trace(0, store).span_s  # a CSV file: read it (its span does not depend on the seed)


@dataclass(frozen=True, slots=True)
class SeedTask:
    """One seed of a several-seed comparison: everything a worker process needs, picklable."""

    source: TraceSource
    kinds: tuple[PolicyKind, ...]
    spec: RunSpec  # its seed is the task's seed
    profiles: Path
    predictor: PredictorKind = PredictorKind.CONTENTION
    keep_results: bool = False  # the SimResults come back too (the first seed's, for the plots over time)


@dataclass(frozen=True, slots=True)
class SeedOutcome:
    seed: int
    trace: Trace
    metrics: Mapping[PolicyKind, PolicyMetrics]
    results: Mapping[PolicyKind, SimResult] | None


def run_seed(task: SeedTask, progress: Progress | None = None) -> SeedOutcome:
    """The comparison on one seed: its own trace, mapping and ground truth, every policy."""
    store = ProfileStore.open(task.profiles)
    trace = task.source.trace(task.spec.seed, store)
    results = run_policies(trace, task.kinds, task.spec, store=store, predictor=make_predictor(task.predictor), progress=progress)
    return SeedOutcome(task.spec.seed, trace, summarize_all(results), results if task.keep_results else None)


def run_seeds(
    tasks: Sequence[SeedTask],
    workers: int = 1,
    progress: Callable[[int], Progress | None] | None = None,
    done: Callable[[SeedOutcome], None] | None = None,
) -> list[SeedOutcome]:
    """Every task, in the order given; with ``workers`` > 1, that many seeds at once in worker processes.

    Seeds are independent and each simulation is deterministic, so the outcomes are the same either
    way, except the wall-clock figures (decision latency, wall time), which share the machine's cores.
    ``progress(seed)`` feeds the per-policy bars of the serial path; ``done`` is called per finished seed.
    """
    if workers < 1:
        raise SpecError(f"need at least one worker, got {workers}", field="workers")
    if workers == 1 or len(tasks) <= 1:
        out = []
        for t in tasks:
            outcome = run_seed(t, progress(t.spec.seed) if progress else None)
            if done:
                done(outcome)
            out.append(outcome)
        return out
    by_seed: dict[int, SeedOutcome] = {}
    # spawn, not fork: a forked child would inherit the parent's threads (rich's refresh thread) mid-state
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=multiprocessing.get_context("spawn")) as pool:
        for fut in as_completed([pool.submit(run_seed, t) for t in tasks]):
            outcome = fut.result()
            by_seed[outcome.seed] = outcome
            if done:
                done(outcome)
    return [by_seed[t.spec.seed] for t in tasks]
