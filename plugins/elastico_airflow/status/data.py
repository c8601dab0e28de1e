"""The scheduling status as plain JSON data: what the page shows and the JSON endpoint serves.

Built only from ``JobService`` reads (GPU ledger, jobs, decisions, prices, measurements). It carries no
URL, connection field or token of any kind: the state's location is reported as its backend name only.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elastico_core.state import JobService, JobView

ACTIVE = ("admitted", "running", "switching")
RECENT_FINISHED = 20


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def _spec_floor(job: JobView) -> float | None:
    jobs = job.spec.get("jobs") or [{}]
    floor = jobs[0].get("floor") if isinstance(jobs[0], dict) else None
    return float(floor) if isinstance(floor, (int, float)) else None


def _job_row(job: JobView) -> dict[str, Any]:
    plan = job.target if job.status.value == "switching" and job.target else job.plan
    current = job.plan
    return {
        "id": job.id,
        "status": job.status.value,
        "workload": job.workload,
        "kind": job.kind,
        "dag_id": job.identity.dag_id or None,
        "task_id": job.identity.task_id or None,
        "knobs": current.knobs.as_dict() if current else None,
        "knobs_short": current.knobs.short() if current else None,
        "target_knobs": job.target.knobs.short() if job.target else None,
        "gpus": list(current.gpus) if current else [],
        "memory_mib": current.memory_mib if current else None,
        "sm": current.sm if current else None,
        "partners": list(current.partners) if current else [],
        "predicted_throughput": current.throughput if current else None,
        "predicted_slowdown": current.predicted_slowdown if current else None,
        "floor": plan.floor if plan else _spec_floor(job),
        "measured_throughput": job.measured_throughput,
        "reason": job.reason,
        "queue_code": job.queue_code,
        "attempts": job.attempts,
        "oom_kills": job.oom_kills,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
    }


def status_snapshot(svc: JobService, *, backend: str, decisions: int = 30, epochs: int = 60) -> dict[str, Any]:
    """Everything the status page shows, as JSON-ready data."""
    from elastico_core.state import JobStatus

    now = dt.datetime.now(dt.UTC)
    active = svc.list_jobs([JobStatus.ADMITTED, JobStatus.RUNNING, JobStatus.SWITCHING])
    pending = svc.list_jobs([JobStatus.PENDING], limit=200)
    done = svc.ended_jobs(limit=RECENT_FINISHED)  # newest end time first, one index scan per status
    rows = {j.id: _job_row(j) for j in active}
    gpus = []
    for g in svc.gpus():
        jobs = [rows[j] for j in g.jobs if j in rows]
        gpus.append(
            {
                "id": g.id,
                "node": g.node,
                "model": g.model,
                "capacity_mib": g.capacity_mib,
                "used_mem_mib": g.used_mem_mib,
                "max_jobs": g.max_jobs,
                "present": g.present,
                "jobs": [
                    {
                        k: r[k]
                        for k in (
                            "id",
                            "status",
                            "workload",
                            "kind",
                            "knobs",
                            "knobs_short",
                            "target_knobs",
                            "memory_mib",
                            "sm",
                            "predicted_slowdown",
                            "measured_throughput",
                            "predicted_throughput",
                        )
                    }
                    for r in jobs
                ],
            }
        )
    queue = []
    for j in pending:
        row = _job_row(j)
        row["waiting_s"] = round((now - j.created_at).total_seconds(), 1)
        queue.append(row)
    price_views = svc.prices(limit=epochs)
    goods = sorted({name for p in price_views for name, _ in p.prices.items})
    prices = {
        "goods": goods,
        "epochs": [p.epoch for p in price_views],
        "at": [_iso(p.at) for p in price_views],
        "series": {g: [dict(p.prices.items).get(g) for p in price_views] for g in goods},
    }
    recent = [
        {
            "epoch": d.epoch,
            "at": _iso(d.at),
            "job_id": d.job_id,
            "kind": d.kind.value,
            "reason": d.reason,
            "code": d.code,
            "from_knobs": d.from_knobs.short() if d.from_knobs else None,
            "to_knobs": d.to_knobs.short() if d.to_knobs else None,
            "from_gpus": list(d.from_gpus),
            "to_gpus": list(d.to_gpus),
        }
        for d in svc.decisions(limit=decisions)
    ]
    slowdowns = []
    for m in svc.measurements(limit=100):
        if m.kind == "oom" or not m.throughput or not m.predicted_throughput:
            continue
        slowdowns.append(
            {
                "job_id": m.job_id,
                "workload": m.workload,
                "knobs": m.knobs.short(),
                "kind": m.kind,
                "colocated": m.colocated,
                "gpu_model": m.gpu_model,
                "predicted_slowdown": m.predicted_slowdown,
                "predicted_throughput": m.predicted_throughput,
                "measured_throughput": m.throughput,
                "measured_slowdown": m.predicted_throughput / m.throughput,
                "at": _iso(m.at),
            }
        )
    counts = {s.value: n for s, n in svc.counts().items()}
    return {
        "generated_at": now.isoformat(),
        "state": {"backend": backend},
        "counts": counts,
        "gpus": gpus,
        "queue": queue,
        "finished": [_job_row(j) for j in done],
        "prices": prices,
        "decisions": recent,
        "slowdowns": slowdowns,
        # defective profile files and quarantined rows the controller reported (the estimator stands in)
        "profile_problems": list(svc.epoch_notes("profile store:")),
    }
