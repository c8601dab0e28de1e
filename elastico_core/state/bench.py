"""``elastico bench state``: registration latency, controller epoch latency and memory for a large queue.

The instance is the planner benchmark's (``bench.instances.random_jobs``: Table-2 workloads, 40 %
inference, Philly-shaped GPU requests) on a cluster of 8-GPU A100-40GB nodes. Registration is timed
honestly both ways: ``per_job`` jobs one ``JobService.register`` call (one transaction) each, the rest
with ``register_many`` in batches of 1,000. Then ``epochs`` controller epochs run on the full queue;
each reports its phases (load, plan, record) and the process's resident memory afterwards.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from elastico_core.bench.instances import make_cluster, random_jobs
from elastico_core.rst.store import ProfileStore
from elastico_core.state.controller import Controller, ControllerConfig
from elastico_core.state.db import StateStore
from elastico_core.state.service import JobService
from elastico_core.state.url import redacted

BULK = 1000


def _rss_mib() -> float:
    return float(psutil.Process(os.getpid()).memory_info().rss) / 2**20


def _peak_rss_mib() -> float:
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024  # Linux: KiB


def job_documents(n: int, seed: int, max_gpus: int) -> list[dict[str, Any]]:
    """``n`` job documents (job YAML entries) of the planner benchmark's realistic random instance."""
    return [
        {"id": s.id, "workload": s.workload.name, "floor": s.floor, "weight": s.weight, "gpus": s.max_gpus}
        for s in random_jobs(n, seed, max_gpus=max_gpus)
    ]


def bench_state(
    *,
    jobs: int = 10_000,
    gpus: int = 4096,
    per_job: int = 1000,
    epochs: int = 3,
    max_pending: int = 2000,
    url: str | None = None,
    profiles: Path | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Run the benchmark; returns its figures (the CLI prints them as JSON)."""
    tmp = None
    if url is None:
        tmp = tempfile.mkdtemp(prefix="elastico-bench-")
        url = f"sqlite:///{Path(tmp) / 'state.db'}"
    try:
        return _run(jobs, gpus, per_job, epochs, max_pending, url, profiles or Path("profiles"), seed)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(jobs: int, gpus: int, per_job: int, epochs: int, max_pending: int, url: str, profiles: Path, seed: int) -> dict[str, Any]:
    rss_start = _rss_mib()
    store = StateStore.open(url)
    service = JobService(store)
    docs = job_documents(jobs, seed, min(8, gpus))
    one: list[float] = []
    for doc in docs[:per_job]:
        t0 = time.perf_counter()
        service.register(doc)
        one.append(time.perf_counter() - t0)
    rest = docs[per_job:]
    t0 = time.perf_counter()
    for i in range(0, len(rest), BULK):
        service.register_many(rest[i : i + BULK])
    bulk_s = time.perf_counter() - t0
    rss_registered = _rss_mib()

    cluster = make_cluster(gpus)
    ctl = Controller(store, cluster, ProfileStore.open(profiles),
                     config=ControllerConfig(interval_s=0, max_pending=max_pending, feedback_interval_s=3600))
    reports = []
    for _ in range(epochs):
        r = ctl.run_epoch()
        reports.append({
            "epoch": r.epoch, "planned": r.planned, "pending_total": r.pending_total, "placed": r.placed,
            "admitted": r.counts.get("admitted", 0), "deferred": r.counts.get("deferred", 0),
            "timings_ms": {k: round(v, 1) for k, v in r.timings_ms.items()},
            "rss_mib": round(_rss_mib(), 1),
        })
    steady = ctl.run_epoch()  # nothing new to decide: the cost of an idle epoch at this size
    ctl.close()
    counts = service.counts()
    store.close()
    ms = [x * 1e3 for x in one]
    return {
        "state": redacted(url),
        "jobs": jobs,
        "gpus": gpus,
        "max_pending": max_pending,
        "register_per_job_ms": {
            "n": len(ms),
            "mean": round(statistics.fmean(ms), 3) if ms else None,
            "p50": round(statistics.median(ms), 3) if ms else None,
            "p99": round(sorted(ms)[int(0.99 * (len(ms) - 1))], 3) if ms else None,
        },
        "register_bulk_ms_per_job": round(bulk_s * 1e3 / len(rest), 3) if rest else None,
        "epochs": reports,
        "steady_epoch": {"recorded": steady.recorded, "planned": steady.planned,
                         "timings_ms": {k: round(v, 1) for k, v in steady.timings_ms.items()}},
        "statuses": {s.value: n for s, n in counts.items()},
        "memory_mib": {"start": round(rss_start, 1), "after_registration": round(rss_registered, 1),
                       "end": round(_rss_mib(), 1), "peak": round(_peak_rss_mib(), 1)},
    }
