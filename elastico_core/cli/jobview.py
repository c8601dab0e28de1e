"""``jobs list`` and ``jobs show`` as a person reads them: aligned lines at 80 columns, units, progress, reasons.

Pure text from ``JobView`` values (and the decisions and measurements ``jobs show`` reads); the commands
in ``cli.jobs`` only open the state and print what these functions return.
"""

from __future__ import annotations

import datetime as dt
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from elastico_core.model.explain import explain_wait, gib, rate, strip_code, unit_of_kind
from elastico_core.model.progress import describe, duration

if TYPE_CHECKING:
    from elastico_core.state import DecisionView, JobView, MeasurementView


def progress_text(job: JobView, now: dt.datetime | None = None) -> str:
    """``12/20 steps (60%), ETA 30 s`` for a running job; ``starting`` before its first report; ``-`` else."""
    status = job.status.value
    if status == "finished":
        return "done"
    if status not in ("running", "switching", "admitted"):
        return "-"
    if job.progress is None:
        return "starting" if status == "admitted" else "no report yet"
    p = job.progress
    return describe(p.steps, p.total_steps, p.eta(job.work, now), p.items)


def why(job: JobView, position: int | None, wide: bool = True) -> str:
    """The job's latest word in the user's terms: for a queued job its position and what it lacks; for a
    placed one (unless ``wide``) only what its row does not show already — predicted rate, floor, partners."""
    unit = unit_of_kind(job.kind)
    if job.status.value == "pending":
        w = explain_wait(job.queue_code, job.reason, job.shortfall, unit=unit, position=position)
        return (f"#{position}: " if position else "") + (w.text() if wide else w.headline)
    plan = job.plan
    if wide or plan is None or job.status.terminal:
        return strip_code(job.reason, job.queue_code) or "-"
    beside = f"beside {', '.join(plan.partners)} ({plan.predicted_slowdown:.2f}x)" if plan.partners else "alone"
    return f"predicted {rate(plan.throughput, unit)} (floor {rate(plan.floor, '').strip()}), {beside}"


def rows(jobs: Sequence[JobView], positions: dict[str, int], wide: bool) -> list[dict[str, str]]:
    out = []
    for j in jobs:
        out.append({
            "id": j.id, "status": j.status.value, "queue": j.queue, "workload": j.workload,
            "config": j.plan.knobs.short() if j.plan else "-", "gpus": ",".join(j.gpus) or "-",
            "progress": progress_text(j), "why": why(j, positions.get(j.id), wide),
        })
    return out


def narrow_lines(items: Sequence[dict[str, str]], width: int) -> list[str]:
    """``kubectl get``-like at any width: ``ID STATUS WORKLOAD PROGRESS`` aligned on one line (progress moves
    down when it does not fit), then the configuration, GPUs and reason indented below, wrapped."""
    heads = ("ID", "STATUS", "WORKLOAD")
    widths = [max(len(h), *(len(r[k]) for r in items)) if items else len(h)
              for h, k in zip(heads, ("id", "status", "workload"), strict=True)]
    lead = sum(widths) + 2 * len(widths)
    prog_w = max((len(r["progress"]) for r in items), default=0)
    inline = lead + max(prog_w, len("PROGRESS")) <= width
    head = "  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))
    lines = [(head + "  PROGRESS" if inline else head).rstrip()]
    for r in items:
        first = "  ".join(r[k].ljust(w) for k, w in zip(("id", "status", "workload"), widths, strict=True))
        detail = []
        if inline:
            first += "  " + r["progress"]
        elif r["progress"] != "-":
            detail.append(r["progress"])
        if r.get("queue", "default") != "default":
            detail.append(f"queue {r['queue']}")
        if r["config"] != "-":
            detail.append(f"{r['config']} on {r['gpus']}")
        lines.append(first.rstrip())
        body = "; ".join([*detail, r["why"]]) if r["why"] != "-" or not detail else "; ".join(detail)
        lines += ["  " + line for line in textwrap.wrap(body, width=max(20, width - 2))]
    return lines


def summary(job: JobView, decisions: Sequence[DecisionView], position: int | None, where: str,
            measurement: MeasurementView | None = None, gpu_model: str = "") -> list[str]:
    """``jobs show``: what runs where, against which floor, how far it is, why it waits, what happened."""
    unit = unit_of_kind(job.kind)
    ident = job.identity
    lines = [f"[bold]{job.id}[/]  {job.status.value}  ({job.kind}: {job.workload}, priority {job.priority})"]
    owner = [f"queue {job.queue}"] + ([f"user {job.user}"] if job.user else [])
    lines.append(f"  state         {where} ({', '.join(owner)})")
    if ident.dag_id:
        mapped = f"[{ident.map_index}]" if ident.map_index >= 0 else ""
        lines.append(f"  Airflow task  {ident.dag_id} / {ident.run_id} / {ident.task_id}{mapped}"
                     + (f", try {job.last_try}" if job.last_try else ""))
    plan = job.plan
    if plan is not None:
        shares = f", sharing with {', '.join(plan.partners)}" if plan.partners else ", alone"
        lines.append(f"  runs          {plan.knobs.short()} on {', '.join(plan.gpus)}{shares}")
        lines.append(f"  holds         {gib(plan.memory_mib)} GPU memory and {100 * plan.sm:.0f}% of the SMs per GPU")
        on = f" on {gpu_model}" if gpu_model else ""
        lines.append(f"  throughput    predicted {rate(plan.throughput / plan.predicted_slowdown, unit)}{on} "
                     f"(slowdown {plan.predicted_slowdown:.2f}x, profile {plan.source}), floor {rate(plan.floor, unit)}")
    if job.measured_throughput is not None:
        lines.append(f"  measured      {rate(job.measured_throughput, unit)}{measured_where(measurement, gpu_model)}")
    if job.progress is not None and job.status.value in ("running", "switching"):
        p = job.progress
        ago = (dt.datetime.now(dt.UTC) - p.at).total_seconds()
        at_rate = f", {rate(p.rate, unit)}" if p.rate else ""
        lines.append(f"  progress      {progress_text(job)}{at_rate} (reported {duration(max(0.0, ago))} ago)")
    if job.target is not None:
        lines.append(f"  switching to  {job.target.knobs.short()} on {', '.join(job.target.gpus)}"
                     f" ({job.pending_action.value if job.pending_action else 'switch'})")
    if job.status.value == "pending":
        lines.append(f"  waits         {why(job, position)}")
    elif job.reason:
        lines.append(f"  last word     {strip_code(job.reason, job.queue_code)}")
    lines.append(f"  attempts      {job.attempts} admissions, {job.oom_kills} out-of-memory kills")
    when = [f"registered {job.created_at:%Y-%m-%d %H:%M:%S}"]
    if job.started_at:
        when.append(f"started {job.started_at:%H:%M:%S}")
    if job.finished_at:
        when.append(f"ended {job.finished_at:%H:%M:%S}")
    lines.append(f"  when          {', '.join(when)}")
    if decisions:
        lines.append("  decisions (newest first):")
        for d in decisions[:10]:
            lines.append(f"    epoch {d.epoch:<5} {d.kind.value:<8} {strip_code(d.reason, d.code)}")
    lines.append("  (the whole record: --json)")
    return lines


def measured_where(m: MeasurementView | None, gpu_model: str) -> str:
    """Where the latest measurement was taken, when it was not the planned GPU (a local run on CPU cores)."""
    if m is None or not m.signature:
        return ""
    if m.signature.startswith("cpu-"):
        model = f" {gpu_model}" if gpu_model else " GPU"
        return f" on this machine's CPU ({m.signature}), not comparable with the{model} prediction"
    return f" on {m.signature.split('|', 1)[0]}"


def brief(job: JobView) -> dict[str, Any]:
    """The fields ``jobs list --json`` prints per job (``jobs show --json`` prints the whole record)."""
    d = job.to_dict()
    keep = ("id", "status", "config", "gpu", "gpus", "workload", "kind", "user", "queue", "token", "pending_action",
            "attempts", "oom_kills", "reason", "queue_code", "shortfall", "measured_throughput", "progress", "version",
            "created_at")
    out = {k: d[k] for k in keep}
    out["dag_id"] = job.identity.dag_id or None
    return out
