"""``elastico bench planner``: epoch latency of the planner on realistic instances, and its gap to the MILP.

The planner measured is the one the controller runs: the production rules (``pds.rules.PRODUCTION``,
memory margin included) and an interference predictor (Table 6's by default), unless told otherwise.
Each run plans one warm-up epoch (fills the option caches, like a controller that has just started),
then ``epochs`` measured epochs with churn: between epochs ~5% of running jobs finish and as many new
jobs arrive, the running jobs keep their placements, prices warm-start from the last epoch and the jobs
left queued are the next epoch's waiting jobs (Eq. 12's queue), as the controller hands them over.
More jobs than the cluster holds (``jobs`` above twice ``gpus`` at two jobs per GPU, say) is a
contended instance: most of the queue waits every epoch.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from elastico_core.bench.callgrind import callgrind_counting
from elastico_core.bench.instances import make_cluster, random_jobs
from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.iac.table6 import table6_predictor
from elastico_core.model.cluster import Cluster
from elastico_core.model.job import JobSpec, narrow_space
from elastico_core.model.planning import PlanningInput
from elastico_core.model.queues import Amount, QueueSet, QueueSpec
from elastico_core.model.state import Assignment
from elastico_core.model.workload import JobKind
from elastico_core.pds.milp import solve_reference
from elastico_core.pds.planner import Planner
from elastico_core.pds.rules import PRODUCTION, ElasticoRules
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.store import ProfileStore


def percentile_ms(samples: list[float], q: float) -> float:
    return float(np.percentile(np.array(samples) * 1e3, q)) if samples else 0.0


def _catalog_jobs(max_gpus: int) -> list[JobSpec]:
    out = []
    for w in PAPER_WORKLOADS.values():
        for dp in (1, 2, 4, 8):
            if dp <= max_gpus and (dp == 1 or w.kind is JobKind.TRAIN):
                out.append(JobSpec(f"warm-{w.name}-{dp}", w, narrow_space(w, {}, dp), max_gpus=dp))
    return out


def bench_planner(
    jobs: int,
    gpus: int,
    seed: int = 0,
    epochs: int = 20,
    milp: bool = False,
    milp_time_limit_s: float = 60.0,
    profiles: Path | None = None,
    predictor: SlowdownPredictor | None = None,
    rules: ElasticoRules = PRODUCTION,
    churn: float = 0.05,
    multi_gpu: bool | None = None,
    queues: int = 0,
    callgrind: bool = False,
) -> dict[str, object]:
    """Run the benchmark and return its figures (the CLI prints them as JSON).

    ``predictor``: Table 6's lookup when None (pass ``NoInterference()`` for capacity alone). ``queues``: that
    many queues in one cohort share the cluster (``bench_queues``), each job in one of them by its id.
    ``callgrind``: count instructions of the measured epochs' planning alone (run under callgrind).
    """
    rng = np.random.default_rng(seed + 1)
    store = ProfileStore.open(profiles or Path("profiles"))
    cluster = rules.planning_cluster(make_cluster(gpus))
    if queues:
        cluster = replace(cluster, queues=bench_queues(cluster, queues))
    use_multi = (not milp) if multi_gpu is None else multi_gpu
    specs = [_in_queue(j, queues) for j in random_jobs(jobs, seed, multi_gpu=use_multi, max_gpus=min(8, gpus))]
    planner = Planner(store, rules.iac_view(predictor if predictor is not None else table6_predictor()), rules.planner)
    result: dict[str, object] = {"jobs": jobs, "gpus": gpus, "seed": seed, "epochs": epochs, "predictor": planner.predictor.name,
                                 "queues": queues}

    first = PlanningInput(cluster, tuple(specs))
    if milp:
        t0 = time.perf_counter()
        plan0 = planner.plan(first)
        esp_seconds = time.perf_counter() - t0
        ref = solve_reference(planner.prepare(first).table, cluster, planner.config.sm_capacity, milp_time_limit_s)
        result.update(
            objective=plan0.objective,
            milp_objective=ref.objective,
            milp_bound=ref.bound,
            milp_optimal=ref.optimal,
            milp_seconds=ref.seconds,
            esp_seconds=esp_seconds,
            gap=max(0.0, (ref.objective - plan0.objective) / max(ref.objective, 1e-12)),
            gap_to_bound=max(0.0, (ref.bound - plan0.objective) / max(ref.bound, 1e-12)),
        )
    # warm-up: compile every (workload, data-parallel cap) once, as a controller does at start-up
    planner.plan(PlanningInput(cluster, tuple(_catalog_jobs(min(8, gpus)))))
    plan = planner.plan(first)
    latencies: list[float] = []
    cpu = 0.0  # the process's CPU time (every thread) over the measured epochs: steadier than wall time on a shared machine
    rounds: list[int] = []
    iterations: list[int] = []
    next_id = jobs
    running = {p.job_id: Assignment(p.job_id, p.knobs, p.gpus) for p in plan.placements}
    prices = plan.prices
    for _ in range(epochs):
        finished = [j for j in running if rng.random() < churn]
        for jid in finished:
            running.pop(jid)
        specs = [s for s in specs if s.id not in finished]
        arrivals = random_jobs(len(finished), seed * 7919 + next_id, multi_gpu=use_multi, max_gpus=min(8, gpus))
        for a in arrivals:
            specs.append(_in_queue(replace(a, id=f"job-{next_id:05d}"), queues))
            next_id += 1
        waiting = frozenset(plan.queued_ids)
        inp = PlanningInput(cluster, tuple(specs), running=dict(running), prices=prices, waiting=waiting, owed=plan.owed)
        if callgrind:
            callgrind_counting(True)
        t0, c0 = time.perf_counter(), time.process_time()
        plan = planner.plan(inp)
        plan.actions  # noqa: B018  # the controller reads the action diff every epoch: part of its latency
        latencies.append(time.perf_counter() - t0)
        if callgrind:
            callgrind_counting(False)
        cpu += time.process_time() - c0
        rounds.append(len(plan.rounds))
        iterations.append(plan.iterations)
        running = {p.job_id: Assignment(p.job_id, p.knobs, p.gpus) for p in plan.placements}
        prices = plan.prices
    result.update(
        latency_ms={"p50": percentile_ms(latencies, 50), "p99": percentile_ms(latencies, 99), "max": percentile_ms(latencies, 100)},
        cpu_ms_per_epoch=cpu * 1e3 / max(epochs, 1),
        rounds=float(np.mean(rounds)),
        iterations=float(np.mean(iterations)),
        placed=len(plan.placements),
        queued=len(plan.queued),
        actions={kind: sum(1 for a in plan.actions if a.kind.value == kind) for kind in ("admit", "switch", "migrate", "keep", "hold", "preempt")},
    )
    return result


def queue_overhead(jobs: int, gpus: int, queues: int, seeds: Sequence[int], repeats: int = 3, epochs: int = 20,
                   predictor: Callable[[], SlowdownPredictor] | None = None, **kw: Any) -> dict[str, object]:
    """What queues cost the planner: the same instances planned without and with ``queues`` queues, in turn, each
    seed ``repeats`` times; per seed the least CPU time per epoch of its runs (the run least disturbed by the
    rest of the machine), summed over seeds. ``ratio``: with queues over without. Every run gets a fresh
    predictor (``predictor`` makes one; Table 6's when None): a shared one would carry its pair cache from one
    run into the next and favour whichever runs second."""
    best: dict[tuple[int, int], float] = {}
    for q in (0, queues):  # one unmeasured run of each first: the process's first plans are slower for reasons of its own
        bench_planner(jobs, gpus, seeds[0], epochs=epochs, queues=q, predictor=predictor() if predictor else None, **kw)
    for _ in range(repeats):
        for s in seeds:
            for q in (0, queues):
                fresh = predictor() if predictor is not None else None
                ms = float(bench_planner(jobs, gpus, s, epochs=epochs, queues=q, predictor=fresh, **kw)["cpu_ms_per_epoch"])  # type: ignore[arg-type]
                best[s, q] = min(ms, best.get((s, q), math.inf))
    without = sum(best[s, 0] for s in seeds) / len(seeds)
    with_queues = sum(best[s, queues] for s in seeds) / len(seeds)
    return {"jobs": jobs, "gpus": gpus, "queues": queues, "seeds": list(seeds), "repeats": repeats, "epochs": epochs,
            "cpu_ms_per_epoch": {"without": without, "with": with_queues}, "ratio": with_queues / without,
            "per_seed": {str(s): {"without": best[s, 0], "with": best[s, queues]} for s in seeds}}


def bench_queues(cluster: Cluster, n: int) -> QueueSet:
    """``n`` queues in one cohort: nominal GPUs proportional to 1/(k+1) (a few large teams, many small ones, by
    largest remainders, summing to the cluster), each with its GPUs' whole memory; no limits, equal weights."""
    model = cluster.gpu_models()[0]
    total = len(cluster.gpus)
    usable_gib = cluster.usable_mem_mib(model) / 1024.0
    share = np.array([1.0 / (k + 1) for k in range(n)])
    exact = total * share / share.sum()
    quota = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - quota), kind="stable")[: total - int(quota.sum())]:
        quota[i] += 1
    return QueueSet(tuple(QueueSpec(f"q{k}", ((model.name, Amount(float(q), q * usable_gib)),), cohort="bench")
                          for k, q in enumerate(quota.tolist())))


def _in_queue(job: JobSpec, queues: int) -> JobSpec:
    """The job in queue ``q<crc32(id) mod n>`` (as it was without queues when ``queues`` is 0)."""
    return replace(job, queue=f"q{zlib.crc32(job.id.encode()) % queues}") if queues else job
