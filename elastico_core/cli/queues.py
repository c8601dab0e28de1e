"""``elastico queues list`` / ``show``: the teams' queues as the controller's last epoch left them."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer
from rich.table import Table

from elastico_core.cli.common import print_json, stdout
from elastico_core.cli.jobs import StateOpt, _positions
from elastico_core.cli.jobview import why as _why
from elastico_core.cli.stateopen import open_reader
from elastico_core.model.errors import SpecError

queues_app = typer.Typer(help="Teams' queues: quotas, use, borrowing, lending, fair share (the last epoch).",
                         no_args_is_help=True)

NO_QUEUES = "the cluster the controller plans against has no queues (add queues: to its cluster file; docs/queues.md)"


def _num(x: float, digits: int = 1) -> str:
    return "-" if not math.isfinite(x) else f"{x:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{x:.0f}"


def _limit(x: float) -> str:
    return "none" if not math.isfinite(x) else _num(x)


@queues_app.command("list")
def list_queues(
    state: StateOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="a JSON list of the queues' figures")] = False,
) -> None:
    """Every queue: nominal quota, in use, borrowed, lent, pending jobs, weight and fair share (GPUs)."""
    service, _ = open_reader(state)
    try:
        statuses = service.queues()
        cluster = service.queued_cluster()
    finally:
        service.close()
    if as_json:
        print_json([s.as_dict() for s in statuses])
        return
    if not statuses:
        stdout.print(NO_QUEUES if cluster is None else "the controller has recorded no epoch with these queues yet")
        return
    t = Table(title=f"{len(statuses)} queues (GPUs; a shared GPU is charged by the larger of its SM and memory "
              "shares, at least one slot)", title_justify="left",
              caption="nominal: guaranteed; fair share: what it may hold now (nominal - lent + its weighted share of "
              "what others do not use); elastico queues show NAME for its jobs", caption_justify="left")
    for col in ("queue", "cohort", "weight", "nominal", "in use", "borrowed", "lent", "pending", "fair share"):
        t.add_column(col, justify="left" if col in ("queue", "cohort") else "right", overflow="fold")
    for s in statuses:
        t.add_row(s.name, s.cohort or "-", _num(s.weight), _num(s.nominal_gpus), _num(s.used_gpus), _num(s.borrowed_gpus),
                  _num(s.lent_gpus), str(s.pending), _num(s.fair_share_gpus))
    stdout.print(t)


@queues_app.command("show")
def show_queue(
    name: Annotated[str, typer.Argument(help="queue name")],
    state: StateOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="the queue's figures, limits and jobs as JSON")] = False,
) -> None:
    """One queue: its quota and limits, what it uses, borrows and lends, its shadow price, and its jobs."""
    from elastico_core.state import JobStatus

    service, _ = open_reader(state)
    try:
        statuses = {s.name: s for s in service.queues()}
        cluster = service.queued_cluster()
        jobs = [j for j in service.list_jobs([s for s in JobStatus if not s.terminal]) if j.queue == name]
        positions = _positions(service) if any(j.status is JobStatus.PENDING for j in jobs) else {}
    finally:
        service.close()
    spec = cluster.queues.get(name) if cluster is not None else None
    if spec is None:
        known = ", ".join(cluster.queues.names) if cluster is not None else ""
        raise SpecError(f"no queue {name!r}" + (f" (queues: {known})" if known else f": {NO_QUEUES}"), field="queue")
    status = statuses.get(name)
    doc: dict[str, Any] = {
        "name": name, "cohort": spec.cohort, "weight": spec.weight,
        "nominal_quota": {m: {"gpus": a.gpus, "gpu_memory_gib": a.memory_gib} for m, a in spec.nominal},
        "borrowing_limit": {m: {"gpus": _json(a.gpus), "gpu_memory_gib": _json(a.memory_gib)} for m, a in spec.borrowing_limit},
        "lending_limit": {m: {"gpus": a.gpus, "gpu_memory_gib": a.memory_gib} for m, a in spec.lending_limit},
        "status": status.as_dict() if status is not None else None,
        "jobs": [{"id": j.id, "status": j.status.value, "gpus": list(j.gpus), "reason": j.reason, "queue_code": j.queue_code}
                 for j in jobs],
    }
    if as_json:
        print_json(doc)
        return
    lines = [f"[bold]{name}[/]  cohort {spec.cohort or '- (neither lends nor borrows)'}, weight {spec.weight:g}, "
             f"lent quota back within {cluster.queues.reclaim_epochs if cluster else '?'} epochs"]
    for m, a in spec.nominal:
        lines.append(f"  nominal quota   {m}: {a.gpus:g} GPUs, {a.memory_gib:.1f} GiB GPU memory; borrowing limit "
                     f"{spec.borrowing_of(m).show()}; lending limit {spec.lending_of(m).show()}")
    if status is None:
        lines.append("  no epoch recorded with this queue yet")
    else:
        lines.append(f"  in use          {status.used_gpus:.2f} GPUs, {status.used_gib:.1f} GiB (borrowed {status.borrowed_gpus:.2f}, "
                     f"lent to others {status.lent_gpus:.2f})")
        lines.append(f"  fair share      {status.fair_share_gpus:.2f} GPUs now (its jobs would take {status.demand_gpus:.2f}); "
                     f"shadow price {status.price:.3g}")
        lines.append(f"  pending         {status.pending} jobs")
    for j in jobs:
        where = ",".join(j.gpus) or "-"
        lines.append(f"  {j.id:<24} {j.status.value:<10} {where}")
        if j.status is JobStatus.PENDING or j.queue_code in ("reclaimed", "quota"):
            lines.append(f"      {_why(j, positions.get(j.id), wide=True)}")
    for line in lines:
        stdout.print(line, highlight=False)


def _json(x: float) -> float | None:
    return None if not math.isfinite(x) else x


def register(app: typer.Typer, bench: typer.Typer) -> None:
    app.add_typer(queues_app, name="queues")
