"""The scheduling status as plain JSON data: what the page shows and the JSON endpoint serves.

Built only from ``JobService`` reads (GPU ledger, jobs, decisions, prices, measurements, the cluster the
controller runs with). It carries no connection field or token: the state's location is reported as its
backend name only; the only URLs are links a person follows (the Airflow task instance and its log, the
job's MLflow run), built from identities, never from credentials.
"""

from __future__ import annotations

import datetime as dt
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from elastico_core.model.explain import explain_wait, queue_positions, strip_code, unit_of_kind

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


def airflow_links(job: JobView, base: str = "") -> dict[str, str]:
    """The Airflow UI pages of the task instance that runs ``job`` and of its latest try's log."""
    ident = job.identity
    if not (ident.dag_id and ident.run_id and ident.task_id):
        return {}
    q = urllib.parse.quote
    ti = f"{base.rstrip('/')}/dags/{q(ident.dag_id)}/runs/{q(ident.run_id, safe='')}/tasks/{q(ident.task_id)}"
    if ident.map_index >= 0:
        ti += f"/mapped/{ident.map_index}"
    log = ti + (f"?try_number={job.last_try}" if job.last_try else "")
    return {"task_instance": ti, "log": log}


def _job_row(job: JobView, links: Mapping[str, str] | None = None, base: str = "") -> dict[str, Any]:
    plan = job.target if job.status.value == "switching" and job.target else job.plan
    current = job.plan
    urls = airflow_links(job, base)
    if links and job.id in links:
        urls["mlflow_run"] = links[job.id]
    return {
        "id": job.id,
        "status": job.status.value,
        "workload": job.workload,
        "kind": job.kind,
        "queue": job.queue,
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
        "unit": unit_of_kind(job.kind),
        "cpu_cores": current.cpu_cores if current else None,
        "host_mem_mib": current.host_mem_mib if current else None,
        "links": urls,
        "reason": strip_code(job.reason, job.queue_code),
        "queue_code": job.queue_code,
        "attempts": job.attempts,
        "oom_kills": job.oom_kills,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at),
    }


def node_view(svc: JobService, active: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each node of the controller's cluster: its GPUs, CPU cores and host memory, and what each job holds."""
    from elastico_core.state.clusters import stored_cluster

    found = stored_cluster(svc.store)
    if found is None:
        return []
    cluster, _ = found
    out = []
    for node in cluster.nodes:
        held = []
        for row in active:
            gpus_here = [g for g in row["gpus"] if g.rsplit("/", 1)[0] == node.name]
            if not gpus_here:
                continue
            n = len(gpus_here)
            held.append({"id": row["id"], "status": row["status"], "workload": row["workload"], "gpus": gpus_here,
                         "gpu_mem_mib": (row["memory_mib"] or 0.0) * n, "cpu_cores": (row["cpu_cores"] or 0.0) * n,
                         "host_mem_mib": (row["host_mem_mib"] or 0.0) * n, "links": row["links"]})
        out.append({
            "name": node.name, "gpu_model": node.gpu.name, "gpus": node.gpu_count,
            "gpus_busy": len({g for h in held for g in h["gpus"]}),
            "cpu_cores": node.cpu_cores, "cpu_used": sum(h["cpu_cores"] for h in held),
            "host_mem_mib": node.host_mem_mib, "host_used_mib": sum(h["host_mem_mib"] for h in held),
            "jobs": held,
        })
    return out


def status_snapshot(
    svc: JobService, *, backend: str, decisions: int = 30, epochs: int = 60, airflow_base: str = "",
    mlflow_links: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Everything the status page shows, as JSON-ready data.

    :param airflow_base: path prefix of the Airflow UI (links to task instances and logs)
    :param mlflow_links: job id -> its MLflow run's page (``tracking.RunLinks``)
    """
    from elastico_core.state import JobStatus

    now = dt.datetime.now(dt.UTC)
    active = svc.list_jobs([JobStatus.ADMITTED, JobStatus.RUNNING, JobStatus.SWITCHING])
    pending = svc.list_jobs([JobStatus.PENDING], limit=200)
    done = svc.ended_jobs(limit=RECENT_FINISHED)  # newest end time first, one index scan per status
    rows = {j.id: _job_row(j, mlflow_links, airflow_base) for j in active}
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
                            "unit",
                            "links",
                        )
                    }
                    for r in jobs
                ],
            }
        )
    queue = []
    positions = queue_positions((j.id, j.priority, j.created_at) for j in pending)
    for j in sorted(pending, key=lambda j: positions[j.id]):
        row = _job_row(j, mlflow_links, airflow_base)
        row["waiting_s"] = round((now - j.created_at).total_seconds(), 1)
        row["position"] = positions[j.id]
        why = explain_wait(j.queue_code, j.reason, j.shortfall, unit=row["unit"], position=positions[j.id])
        row["why"] = why.headline
        row["admit_hint"] = why.admit_hint
        row["shortfall"] = dict(j.shortfall) if j.shortfall else None
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
            "reason": strip_code(d.reason, d.code),
            "code": d.code,
            "from_knobs": d.from_knobs.short() if d.from_knobs else None,
            "to_knobs": d.to_knobs.short() if d.to_knobs else None,
            "from_gpus": list(d.from_gpus),
            "to_gpus": list(d.to_gpus),
        }
        for d in svc.decisions(limit=decisions)
    ]
    slowdowns = []
    seen: set[str] = set()
    for m in svc.measurements(limit=200):  # newest first: one row per job, its latest measurement
        if m.kind == "oom" or not m.throughput or not m.predicted_throughput or m.job_id in seen:
            continue
        seen.add(m.job_id)
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
                "measured_on": m.signature,
                "at": _iso(m.at),
            }
        )
    counts = {s.value: n for s, n in svc.counts().items()}
    return {
        "generated_at": now.isoformat(),
        "state": {"backend": backend},
        "counts": counts,
        "nodes": node_view(svc, list(rows.values())),
        "gpus": gpus,
        "queue": queue,
        # teams' queues as the last epoch left them (quota, use, borrowed, lent, fair share): empty without queues
        "queues": [q.as_dict() for q in svc.queues()],
        "finished": [_job_row(j, mlflow_links, airflow_base) for j in done],
        "prices": prices,
        "decisions": recent,
        "slowdowns": slowdowns,
        # defective profile files and quarantined rows the controller reported (the estimator stands in)
        "profile_problems": list(svc.epoch_notes("profile store:")),
    }
