"""Helpers of the state tests: PostgreSQL discovery, small clusters and jobs, and the ledger invariant."""

from __future__ import annotations

import functools
import math
import os
from typing import Any

import sqlalchemy as sa

from elastico_core.specs import parse_cluster
from elastico_core.state.db import make_engine
from elastico_core.state.models import Allocation, Decision, Gpu, Job
from elastico_core.state.service import JobService
from elastico_core.state.values import JobStatus

PG_ENV = "ELASTICO_TEST_PG_URL"
PG_DEFAULT = "postgresql+psycopg2://elastico:elastico@127.0.0.1:5432/elastico"


def pg_base_url() -> str:
    return os.environ.get(PG_ENV) or PG_DEFAULT


@functools.cache
def pg_unavailable_reason() -> str | None:
    url = sa.engine.make_url(pg_base_url())
    try:
        engine = sa.create_engine(url, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        engine.dispose()
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"no PostgreSQL reachable at {url.render_as_string(hide_password=True)} (set {PG_ENV}): {first[:160]}"
    return None


def pg_schema_url(schema: str) -> str:
    url = sa.engine.make_url(pg_base_url()).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


def cluster_yaml(nodes: int = 1, gpus: int = 2, gpu: str = "a100-40gb", max_jobs: int = 2) -> str:
    return (
        f"cluster:\n  name: test\n  max_jobs_per_gpu: {max_jobs}\n  nodes:\n"
        f"    - {{name: node, count: {nodes}, gpu: {gpu}, gpus: {gpus}, cpu_cores: 64, host_mem_gib: 512}}\n"
    )


def make_cluster(nodes: int = 1, gpus: int = 2, gpu: str = "a100-40gb", max_jobs: int = 2) -> Any:
    return parse_cluster(cluster_yaml(nodes, gpus, gpu, max_jobs), "test cluster")


def check_ledger(url: str) -> dict[str, Any]:
    """Assert the GPU accounting invariant of ``elastico_core.state.ledger``; returns a summary."""
    engine = make_engine(url)
    opts: dict[str, Any] = {"elastico_readonly": True}
    if engine.dialect.name == "postgresql":
        opts["isolation_level"] = "REPEATABLE READ"  # one snapshot for all the reads below
    try:
        with engine.connect().execution_options(**opts) as conn, conn.begin():
            gpus = {r.id: r for r in conn.execute(sa.select(Gpu.__table__))}
            allocs = conn.execute(sa.select(Allocation.__table__)).all()
            jobs = {r.id: r for r in conn.execute(sa.select(Job.id, Job.status, Job.plan, Job.target, Job.attempts))}
            admits = conn.execute(
                sa.select(Decision.job_id, sa.func.count()).where(Decision.kind == "admit").group_by(Decision.job_id)
            ).all()
    finally:
        engine.dispose()
    used: dict[str, float] = {}
    count: dict[str, int] = {}
    held: dict[str, dict[str, float]] = {}
    for a in allocs:
        used[a.gpu_id] = used.get(a.gpu_id, 0.0) + a.mem_mib
        count[a.gpu_id] = count.get(a.gpu_id, 0) + 1
        held.setdefault(a.job_id, {})[a.gpu_id] = a.mem_mib
    for gid, g in gpus.items():
        assert math.isclose(g.used_mem_mib, used.get(gid, 0.0), abs_tol=1e-3), (gid, g.used_mem_mib, used.get(gid))
        assert g.jobs == count.get(gid, 0), (gid, g.jobs, count.get(gid))
        assert g.used_mem_mib <= g.capacity_mib + 0.01, f"GPU {gid} over-booked: {g.used_mem_mib} > {g.capacity_mib}"
        assert g.jobs <= g.max_jobs, f"GPU {gid} holds {g.jobs} jobs > {g.max_jobs}"
    for job_id, j in jobs.items():
        status = JobStatus(j.status)
        if not status.holds_gpus:
            assert job_id not in held, f"{job_id} is {status.value} but holds {held.get(job_id)}"
            continue
        assert job_id in held, f"{job_id} is {status.value} but holds nothing"
        want: dict[str, float] = {g: float(j.plan["memory_mib"]) for g in j.plan["gpus"]}
        if status is JobStatus.SWITCHING and j.target:
            for g in j.target["gpus"]:
                want[g] = max(want.get(g, 0.0), float(j.target["memory_mib"]))
        assert set(held[job_id]) == set(want), (job_id, held[job_id], want)
        for g, m in want.items():
            assert math.isclose(held[job_id][g], m, abs_tol=1e-3), (job_id, g, held[job_id][g], m)
    per_job = dict(admits)
    for job_id, j in jobs.items():
        assert per_job.get(job_id, 0) == j.attempts, f"{job_id}: {per_job.get(job_id, 0)} admissions, attempts {j.attempts}"
    return {"gpus": len(gpus), "allocations": len(allocs), "jobs": len(jobs),
            "holding": sum(1 for j in jobs.values() if JobStatus(j.status).holds_gpus)}


def launch_admitted(service: JobService) -> None:
    """What launchers do between epochs: start admitted jobs, honour switches (checkpoint, relaunch)."""
    for job in service.list_jobs([JobStatus.ADMITTED, JobStatus.SWITCHING]):
        if job.status is JobStatus.ADMITTED and job.plan is not None:
            service.report_started(job.id, job.plan.token)
        elif job.target is not None:
            service.acknowledge(job.id, job.target.token)
