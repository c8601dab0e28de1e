"""Plans as plain JSON-ready dicts (the CLI's ``--json``, the state store and the status page)."""

from __future__ import annotations

from typing import Any

from elastico_core.model.launch import LaunchSettings
from elastico_core.model.plan import Action, Placement, Plan, Queued, RoundLog


def placement_dict(p: Placement, launch: LaunchSettings | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "job": p.job_id,
        "knobs": p.knobs.as_dict(),
        "gpus": list(p.gpus),
        "memory_mib": round(p.resources.gpu_mem_mib, 1),
        "sm": round(p.resources.sm, 4),
        "cpu_cores": p.resources.cpu_cores,
        "host_mem_mib": p.resources.host_mem_mib,
        "throughput": p.throughput,
        "effective_throughput": p.effective_throughput,
        "floor": p.floor,
        "predicted_slowdown": p.predicted_slowdown,
        "partners": list(p.partners),
        "source": p.source,
    }
    if launch is not None:
        out["launch"] = {"env": launch.env_dict(), "args": list(launch.args)}
    return out


def queued_dict(q: Queued) -> dict[str, Any]:
    """A queued job; ``shortfall`` in its resource's own unit (memory MiB, SM share of one GPU, CPU cores)."""
    return {
        "job": q.job_id,
        "code": q.code.value,
        "reason": q.reason,
        "shortfall": q.shortfall.as_dict() if q.shortfall is not None else None,
    }


def action_dict(a: Action) -> dict[str, Any]:
    return {
        "kind": a.kind.value,
        "job": a.job_id,
        "reason": a.reason,
        "change": a.change.label if a.change else None,
        "from_knobs": a.from_knobs.as_dict() if a.from_knobs else None,
        "to_knobs": a.to_knobs.as_dict() if a.to_knobs else None,
        "from_gpus": list(a.from_gpus),
        "to_gpus": list(a.to_gpus),
    }


def round_dict(r: RoundLog) -> dict[str, Any]:
    return {
        "round": r.round,
        "iterations": r.iterations,
        "objective": r.objective,
        "placed": r.placed,
        "prices": r.prices.as_dict(),
        "violations": [
            {"gpu": v.gpu, "jobs": [v.job_a, v.job_b], "slowdown": [v.slowdown_a, v.slowdown_b], "tau": [v.tau_a, v.tau_b]}
            for v in r.violations
        ],
        "penalties": [{"job": p.job_id, "knobs": p.knobs.as_dict(), "amount": p.amount} for p in r.penalties],
        "separated": [list(pair) for pair in r.separated],
    }


def plan_dict(plan: Plan, launch: dict[str, LaunchSettings] | None = None) -> dict[str, Any]:
    launch = launch or {}
    return {
        "placements": [placement_dict(p, launch.get(p.job_id)) for p in plan.placements],
        "queued": [queued_dict(q) for q in plan.queued],
        "actions": [action_dict(a) for a in plan.actions],
        "prices": plan.prices.as_dict(),
        "rounds": [round_dict(r) for r in plan.rounds],
        "objective": plan.objective,
        "iterations": plan.iterations,
        "notes": list(plan.notes),
        **({"queues": [q.as_dict() for q in plan.queues], "owed": dict(plan.owed)} if plan.queues else {}),
    }
