"""The scheduling status as plain JSON data: what the page shows and the JSON endpoint serves.

Built only from ``JobService`` reads (GPU ledger, jobs, decisions, prices, measurements, the cluster the
controller runs with). It carries no connection field or token: the state's location is reported as its
backend name only; the only URLs are links a person follows (the Airflow task instance and its log, the
job's MLflow run), built from identities, never from credentials.
"""

from __future__ import annotations

import datetime as dt
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from elastico_core.model.explain import explain_wait, queue_positions, rate, strip_code, unit_of_kind
from elastico_core.model.progress import describe, duration

if TYPE_CHECKING:
    from elastico_core.state import DecisionView, JobFilter, JobService, JobView

ACTIVE = ("admitted", "running", "switching")
RECENT_FINISHED = 20
TIMELINE_S = 3600.0  # the GPU timeline shows the last hour
OCCUPYING = ("admit", "switch", "migrate")  # decisions that put a job on GPUs
RELEASING = ("preempt", "fail")  # decisions that take its GPUs away


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


def progress_of(job: JobView, now: dt.datetime) -> dict[str, Any] | None:
    """A running job's progress for the page: steps, fraction, ETA, its text (``model.progress``'s words)."""
    p = job.progress
    if p is None or job.status.value not in ("running", "switching"):
        return None
    eta = p.eta(job.work, now)
    return {"steps": p.steps, "total_steps": p.total_steps, "done": p.done, "rate": p.rate,
            "fraction": eta.fraction, "eta_s": eta.remaining_s, "text": describe(p.steps, p.total_steps, eta, p.items),
            "reported_at": _iso(p.at), "age": duration(max(0.0, (now - p.at).total_seconds()))}


def _job_row(job: JobView, links: Mapping[str, str] | None = None, base: str = "",
             now: dt.datetime | None = None) -> dict[str, Any]:
    plan = job.target if job.status.value == "switching" and job.target else job.plan
    current = job.plan
    urls = airflow_links(job, base)
    if links and job.id in links:
        urls["mlflow_run"] = links[job.id]
    unit = unit_of_kind(job.kind)
    predicted = current.throughput / current.predicted_slowdown if current else None
    return {
        "id": job.id,
        "status": job.status.value,
        "workload": job.workload,
        "kind": job.kind,
        "user": job.user or None,
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
        "predicted_effective": predicted,
        "floor": plan.floor if plan else _spec_floor(job),
        "measured_throughput": job.measured_throughput,
        "unit": unit,
        "predicted_text": rate(predicted, unit),
        "measured_text": rate(job.measured_throughput, unit),
        "floor_text": rate(plan.floor if plan else _spec_floor(job), unit),
        "progress": progress_of(job, now or dt.datetime.now(dt.UTC)),
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


def timeline(decisions: Sequence[DecisionView], jobs: Mapping[str, JobView], gpu_ids: Sequence[str],
             now: dt.datetime, window_s: float = TIMELINE_S) -> dict[str, Any]:
    """GPU occupancy over the last ``window_s``: from each job's admit/switch/migrate decisions (which GPUs
    from when) until the next such decision, a preemption, its end, or now. Bars carry a lane (0/1) so the
    two jobs of a shared GPU are drawn side by side."""
    horizon = now - dt.timedelta(seconds=window_s)
    segments: list[tuple[str, tuple[str, ...], dt.datetime, dt.datetime, str]] = []
    by_job: dict[str, list[DecisionView]] = {}
    for d in decisions:
        by_job.setdefault(d.job_id, []).append(d)
    for job_id, ds in by_job.items():
        ds.sort(key=lambda d: (d.at, d.id))
        job = jobs.get(job_id)
        open_: tuple[tuple[str, ...], dt.datetime, str] | None = None
        for d in ds:
            kind = d.kind.value
            if kind in OCCUPYING and d.to_gpus:
                if open_ is not None:
                    segments.append((job_id, open_[0], open_[1], d.at, open_[2]))
                open_ = (d.to_gpus, d.at, d.to_knobs.short() if d.to_knobs else "")
            elif kind in RELEASING and open_ is not None:
                segments.append((job_id, open_[0], open_[1], d.at, open_[2]))
                open_ = None
        if open_ is not None:
            end = now
            if job is not None and job.status.terminal:
                end = job.finished_at or job.updated_at
            elif job is not None and job.status.value == "pending":
                end = job.updated_at
            segments.append((job_id, open_[0], open_[1], max(end, open_[1]), open_[2]))
    segments = [s for s in segments if s[3] >= horizon]
    # the axis starts at the first bar in the window (at least two minutes back): a short demo stays readable
    first = min((s[2] for s in segments), default=now)
    start = max(horizon, min(first, now - dt.timedelta(seconds=120)))
    bars: list[dict[str, Any]] = []
    lanes: dict[str, list[dt.datetime]] = {}
    for job_id, gpus, t0, t1, label in sorted(segments, key=lambda s: (s[2], s[0])):
        for g in gpus:
            ends = lanes.setdefault(g, [])
            lane = next((i for i, free_at in enumerate(ends) if free_at <= t0), len(ends))
            if lane == len(ends):
                ends.append(t1)
            else:
                ends[lane] = t1
            bars.append({"gpu": g, "job_id": job_id, "start": _iso(max(t0, start)), "end": _iso(t1), "lane": lane % 2,
                         "label": label or job_id})
    shown = list(gpu_ids) or sorted({b["gpu"] for b in bars})
    return {"gpus": shown, "bars": bars, "start": _iso(start), "end": _iso(now)}


def status_snapshot(
    svc: JobService, *, backend: str, decisions: int = 30, epochs: int = 60, airflow_base: str = "",
    mlflow_links: Mapping[str, str] | None = None, where: JobFilter | None = None, timeline_s: float = TIMELINE_S,
) -> dict[str, Any]:
    """Everything the status page shows, as JSON-ready data.

    :param airflow_base: path prefix of the Airflow UI (links to task instances and logs)
    :param mlflow_links: job id -> its MLflow run's page (``tracking.RunLinks``)
    :param where: only these jobs in the job lists (the GPU, node and price views show the whole cluster)
    """
    from elastico_core.state import DecisionKind, JobStatus

    now = dt.datetime.now(dt.UTC)
    all_active = svc.list_jobs([JobStatus.ADMITTED, JobStatus.RUNNING, JobStatus.SWITCHING])
    active = svc.list_jobs([JobStatus.ADMITTED, JobStatus.RUNNING, JobStatus.SWITCHING], where=where) if where else all_active
    pending_all = svc.list_jobs([JobStatus.PENDING], limit=200)
    pending = [j for j in pending_all if _selected(j, where)]
    done = svc.ended_jobs(limit=RECENT_FINISHED, where=where)  # newest end time first, one index scan per status
    rows = {j.id: _job_row(j, mlflow_links, airflow_base, now) for j in all_active}
    gpu_views = svc.gpus()
    gpus = []
    for g in gpu_views:
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
                            "id", "status", "workload", "kind", "knobs", "knobs_short", "target_knobs", "memory_mib",
                            "sm", "predicted_slowdown", "measured_throughput", "predicted_throughput", "unit", "links",
                            "progress", "predicted_text", "measured_text",
                        )
                    }
                    for r in jobs
                ],
            }
        )
    queue = []
    positions = queue_positions((j.id, j.priority, j.queued_at or j.created_at) for j in pending_all)
    order = sorted(pending_all, key=lambda j: positions[j.id])
    for j in sorted(pending, key=lambda j: positions[j.id]):
        row = _job_row(j, mlflow_links, airflow_base, now)
        row["waiting_s"] = round((now - j.created_at).total_seconds(), 1)
        row["position"] = positions[j.id]
        behind = order[positions[j.id] - 2].id if positions[j.id] > 1 else None
        why = explain_wait(j.queue_code, j.reason, j.shortfall, unit=row["unit"], position=positions[j.id],
                           behind=behind)
        row["why"] = why.headline
        row["admit_hint"] = why.admit_hint
        row["behind"] = behind
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
    placing = svc.decisions(limit=2000, kinds=[DecisionKind(k) for k in (*OCCUPYING, *RELEASING)])
    known = {**{j.id: j for j in all_active}, **{j.id: j for j in done}, **{j.id: j for j in pending_all}}
    missing = {d.job_id for d in placing} - set(known)
    if missing:
        known.update(svc.get_many(missing))
    if where:
        placing = tuple(d for d in placing if d.job_id in known and _selected(known[d.job_id], where))
    slowdowns = []
    seen: set[str] = set()
    for m in svc.measurements(limit=200):  # newest first: one row per job, its latest measurement
        if m.kind == "oom" or not m.throughput or not m.predicted_throughput or m.job_id in seen:
            continue
        if where and (m.job_id not in known or not _selected(known[m.job_id], where)):
            continue
        seen.add(m.job_id)
        unit = unit_of_kind(known[m.job_id].kind) if m.job_id in known else ""
        predicted = m.predicted_throughput / (m.predicted_slowdown or 1.0)
        slowdowns.append(
            {
                "job_id": m.job_id,
                "workload": m.workload,
                "knobs": m.knobs.short(),
                "kind": m.kind,
                "colocated": m.colocated,
                "gpu_model": m.gpu_model,
                "unit": unit,
                "predicted_slowdown": m.predicted_slowdown,
                "predicted_throughput": m.predicted_throughput,
                "predicted_effective": predicted,
                "measured_throughput": m.throughput,
                "measured_slowdown": m.predicted_throughput / m.throughput,
                "measured_on": m.signature,
                "on_cpu": m.signature.startswith("cpu-"),
                "predicted_text": rate(predicted, unit),
                "measured_text": rate(m.throughput, unit),
                "at": _iso(m.at),
            }
        )
    counts = {s.value: n for s, n in svc.counts().items()}
    return {
        "generated_at": now.isoformat(),
        "state": {"backend": backend},
        "filter": {"user": where.user, "dag": where.dag, "queue": where.queue, "job": where.job} if where else {},
        "choices": _choices(known.values()),
        "counts": counts,
        "nodes": node_view(svc, list(rows.values())),
        "gpus": gpus,
        "running": [_job_row(j, mlflow_links, airflow_base, now) for j in active],
        "queue": queue,
        # teams' queues as the last epoch left them (quota, use, borrowed, lent, fair share): empty without queues
        "queues": [q.as_dict() for q in svc.queues()],
        "finished": [_job_row(j, mlflow_links, airflow_base, now) for j in done],
        # "now" in whole 10-second steps: a page refreshed while nothing changed draws no new chart
        "timeline": timeline(placing, known, [g.id for g in gpu_views if g.present],
                             now.replace(microsecond=0, second=now.second - now.second % 10), timeline_s),
        "prices": prices,
        "decisions": recent,
        "slowdowns": slowdowns,
        # defective profile files and quarantined rows the controller reported (the estimator stands in)
        "profile_problems": list(svc.epoch_notes("profile store:")),
        # workloads the interference model has not seen, planned at the cold-start assumption (rules.explore_cold)
        "iac_notes": list(svc.epoch_notes("interference model")),
    }


def _selected(job: JobView, where: JobFilter | None) -> bool:
    if not where:
        return True
    return ((not where.user or job.user == where.user) and (not where.dag or job.identity.dag_id == where.dag)
            and (not where.queue or job.queue == where.queue) and (not where.job or job.id == where.job))


def _choices(jobs: Any) -> dict[str, list[str]]:
    """The users, DAGs and queues of the jobs on the page: what the filter's drop-downs offer."""
    jobs = list(jobs)
    return {
        "user": sorted({j.user for j in jobs if j.user}),
        "dag": sorted({j.identity.dag_id for j in jobs if j.identity.dag_id}),
        "queue": sorted({j.queue for j in jobs}),
    }
