"""``elastico bench iac``: batched slowdown prediction throughput and per-call latency.

The batch is what the planner sends: ``pairs`` directional rows of catalog configurations (estimated
profiles on an A100-80GB) in ``PairBatch`` form, so the figure includes building the features. A
200-job epoch with every job co-located is 100 shared GPUs, i.e. 200 rows: ``--pairs 200`` measures
the IAC step of such an epoch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from elastico_core.iac.batch import PairBatch, profile_batch
from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.model.hardware import gpu_model
from elastico_core.model.knobs import cartesian
from elastico_core.model.profile import Profile
from elastico_core.model.workload import Workload
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.estimators import estimate


@dataclass(frozen=True, slots=True)
class BenchResult:
    pairs: int
    calls: int
    pairs_per_s: float
    p50_ms: float
    p99_ms: float

    def as_dict(self) -> dict[str, Any]:
        return {"pairs_per_s": round(self.pairs_per_s, 1), "latency_ms": {"p50": round(self.p50_ms, 4), "p99": round(self.p99_ms, 4)}}


def candidate_batch(pairs: int, *, seed: int = 0, gpu: str = "a100-80gb", per_workload: int = 24) -> PairBatch:
    """``pairs`` random (a, b) rows over up to ``per_workload`` configurations of each catalog workload."""
    g = gpu_model(gpu)
    rng = np.random.default_rng(seed)
    items: list[tuple[Workload, Profile]] = []
    for w in PAPER_WORKLOADS.values():
        configs = [k for k in cartesian(w.knobs) if k.get("dp", 1) == 1]
        for i in rng.permutation(len(configs))[: per_workload * 3]:
            p = estimate(w, configs[int(i)], g)
            if p is not None:
                items.append((w, p))
            if sum(1 for x, _ in items if x is w) >= per_workload:
                break
    pool = profile_batch(items)
    ia = rng.integers(len(pool), size=pairs)
    ib = rng.integers(len(pool), size=pairs)
    return PairBatch(pool.take(ia), pool.take(ib), np.full(pairs, float(g.memory_mib)))


def bench_predictor(predictor: SlowdownPredictor, batch: PairBatch, *, calls: int | None = None, warmup: int = 3) -> BenchResult:
    """Time ``calls`` predictions of the whole batch (default: about a second of work, 20..2000 calls)."""
    for _ in range(warmup):
        predictor.predict(batch)
    if calls is None:
        t0 = time.perf_counter()
        predictor.predict(batch)
        one = max(time.perf_counter() - t0, 1e-6)
        calls = int(np.clip(1.0 / one, 20, 2000))
    samples = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter()
        predictor.predict(batch)
        samples[i] = time.perf_counter() - t0
    p50 = float(np.percentile(samples, 50))
    return BenchResult(len(batch), calls, len(batch) / p50, p50 * 1e3, float(np.percentile(samples, 99)) * 1e3)


def bench_model(kind: str = "mlp", *, seed: int = 0) -> Any:
    """A model of ``kind`` fitted briefly on synthetic rows: its speed, not its accuracy, is measured."""
    from elastico_core.iac.evaluate import fit_model
    from elastico_core.iac.models import ModelKind, make_model
    from elastico_core.iac.synthetic import generate

    mk = ModelKind(kind)
    params: dict[str, Any] = {"max_epochs": 20} if mk is ModelKind.MLP else {}
    return fit_model(make_model(mk, seed, **params), generate(300, seed=seed).samples())
