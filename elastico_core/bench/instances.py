"""Realistic random planning instances drawn from the workload zoo and its profiles."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from elastico_core.model.cluster import Cluster, Node
from elastico_core.model.hardware import gpu_model
from elastico_core.model.job import JobSpec, narrow_space
from elastico_core.model.knobs import cartesian
from elastico_core.model.workload import JobKind, Workload
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.estimators import estimate

# Data-parallel requests of training jobs, shaped like Philly's (most jobs ask for one GPU).
DP_REQUEST = ((1, 0.7), (2, 0.15), (4, 0.1), (8, 0.05))


def make_cluster(gpus: int, gpu: str = "a100-40gb", per_node: int = 8, name: str = "bench") -> Cluster:
    model = gpu_model(gpu)
    nodes = []
    left, i = gpus, 0
    while left > 0:
        n = min(per_node, left)
        nodes.append(Node(f"node-{i}", model, n, cpu_cores=16.0 * n, host_mem_mib=128.0 * 1024 * n))
        left -= n
        i += 1
    return Cluster(name, tuple(nodes))


def _best_throughput(workload: Workload, gpu: str, max_dp: int) -> float:
    model = gpu_model(gpu)
    best = 0.0
    for knobs in cartesian(workload.knobs):
        if int(knobs.get("dp", 1) or 1) > max_dp:
            continue
        p = estimate(workload, knobs, model)
        if p is not None:
            best = max(best, p.throughput)
    return best


RUN_TIME_MEDIAN_S, RUN_TIME_SIGMA = 1000.0, 1.2  # a benchmark job's run time at its fastest configuration


def random_jobs(
    n: int,
    seed: int,
    *,
    gpu: str = "a100-40gb",
    infer_share: float = 0.4,
    multi_gpu: bool = True,
    max_gpus: int = 8,
    floor_max: float = 0.5,
    workloads: Mapping[str, Workload] = PAPER_WORKLOADS,
) -> tuple[JobSpec, ...]:
    """n jobs: ``infer_share`` of them offline inference, weights 1-3, floors up to ``floor_max`` of best.

    Each job's work is what its fastest configuration does in a log-normal run time (median 1,000 s, as
    paper-mix's jobs; drawn from a generator of its own, so the rest of an instance is what it was before
    jobs had work), which sizes its weight as production does (``pds.job_size``)."""
    rng = np.random.default_rng(seed)
    run_time = np.random.default_rng((seed, 1))
    train = [w for w in workloads.values() if w.kind is JobKind.TRAIN]
    infer = [w for w in workloads.values() if w.kind is JobKind.INFER]
    best: dict[tuple[str, int], float] = {}
    jobs = []
    for i in range(n):
        is_infer = rng.random() < infer_share
        w = infer[rng.integers(len(infer))] if is_infer else train[rng.integers(len(train))]
        dp = 1
        if not is_infer and multi_gpu:
            dp = int(rng.choice([d for d, _ in DP_REQUEST], p=[p for _, p in DP_REQUEST]))
            dp = min(dp, max_gpus)
        key = (w.name, dp)
        if key not in best:
            best[key] = _best_throughput(w, gpu, dp)
        floor = float(rng.uniform(0.0, floor_max)) * best[key] / max(dp, 1)
        jobs.append(
            JobSpec(
                id=f"job-{i:05d}",
                workload=w,
                knob_space=narrow_space(w, {}, dp),
                floor=round(floor, 3),
                weight=float(rng.integers(1, 4)),
                work=float(best[key] * RUN_TIME_MEDIAN_S * np.exp(RUN_TIME_SIGMA * run_time.normal())),
                max_gpus=dp,
                submit_time_s=float(i),
            )
        )
    return tuple(jobs)
