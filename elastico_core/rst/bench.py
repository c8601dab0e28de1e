"""How long an estimate takes: the parametric estimator against the traced one, interleaved in one run."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

from elastico_core.model.hardware import GpuModel
from elastico_core.model.knobs import Knobs, cartesian
from elastico_core.model.profile import Profile
from elastico_core.model.workload import Workload
from elastico_core.rst.estimators import estimate
from elastico_core.rst.traced_estimator import TracedEstimator

Estimator = Callable[[Workload, Knobs, GpuModel], Profile | None]


def bench_estimators(root: Path, workloads: Mapping[str, Workload], gpu: GpuModel, rounds: int = 5) -> dict[str, object]:
    """Best-of-``rounds`` seconds per estimate of every configuration, parametric and traced taking turns."""
    configs = [(w, k) for w in workloads.values() for k in cartesian(w.knobs)]
    t0 = time.perf_counter()
    traced = TracedEstimator.open(root)
    traced(*configs[0], gpu)  # reads the cache
    open_s = time.perf_counter() - t0
    best: dict[str, float] = {"parametric": float("inf"), "traced": float("inf")}
    runs: dict[str, Estimator] = {"parametric": estimate, "traced": traced}
    for _ in range(rounds):
        for name, f in runs.items():
            t = time.perf_counter()
            for w, k in configs:
                f(w, k, gpu)
            best[name] = min(best[name], time.perf_counter() - t)
    per = {k: v / len(configs) for k, v in best.items()}
    return {"configurations": len(configs), "gpu": gpu.name, "us_per_estimate": {k: round(v * 1e6, 2) for k, v in per.items()},
            "traced_over_parametric": round(per["traced"] / per["parametric"], 3), "cache_read_ms": round(open_s * 1e3, 2),
            "traced_configurations": len(traced.cache.training()) + len(traced.cache.inference())}  # fmt: skip
