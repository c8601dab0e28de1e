"""Run several policies over one trace and cluster, and turn the results into the comparison document."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from elastico_core.bench.instances import make_cluster
from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.model.cluster import Cluster
from elastico_core.model.errors import SpecError
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.metrics import PolicyMetrics, normalised, summarize
from elastico_core.sim.policy import PolicyContext, PolicyFactory, PolicyKind, Registry
from elastico_core.sim.registry import default_registry
from elastico_core.sim.result import SimResult
from elastico_core.sim.simulator import SimConfig, simulate
from elastico_core.sim.trace import Trace
from elastico_core.sim.truth import ContentionPredictor, TruthKind, make_truth

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
