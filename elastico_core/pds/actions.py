"""The action diff: what must change to move the cluster from its current state to a plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastico_core.model.knobs import change_kind
from elastico_core.model.plan import Action, ActionKind, Placement, QueueCode, Queued
from elastico_core.model.state import Assignment

if TYPE_CHECKING:
    from elastico_core.model.planning import PlanningInput


# per job, its last KEEP action and the placement and assignment it was made for: epochs mostly keep
# what runs, and the planner hands back the same Placement object for a job it keeps unchanged
_KEEPS: dict[str, tuple[Placement, Assignment, Action]] = {}


def _keep(p: Placement, cur: Assignment, hit: tuple[Placement, Assignment, Action] | None) -> Action:
    """The KEEP action for a job kept as it runs: last epoch's when it names the same configuration."""
    if hit is not None and hit[2].from_knobs is cur.knobs and hit[2].from_gpus == cur.gpus:
        action = hit[2]
    else:
        if len(_KEEPS) >= 65536:
            _KEEPS.clear()
        action = Action(
            ActionKind.KEEP, p.job_id, "unchanged", from_knobs=cur.knobs, to_knobs=cur.knobs, from_gpus=cur.gpus, to_gpus=cur.gpus
        )
    _KEEPS[p.job_id] = (p, cur, action)
    return action


def diff_actions(inp: PlanningInput, placements: tuple[Placement, ...], queued: tuple[Queued, ...]) -> tuple[Action, ...]:
    """One action per known job: admit, switch (classified, §5.7), migrate, keep, hold or preempt."""
    specs: dict[str, object] | None = None
    out: list[Action] = []
    running, keeps, append = inp.running, _KEEPS, out.append
    for p in placements:
        cur = running.get(p.job_id)
        if cur is not None:
            hit = keeps.get(p.job_id)
            if hit is not None and hit[0] is p and hit[1] is cur:
                append(hit[2])  # kept as last epoch, by the same objects
                continue
            if (cur.knobs is p.knobs or cur.knobs == p.knobs) and cur.gpus == p.gpus:
                append(_keep(p, cur, hit))
                continue
        where = ",".join(p.gpus)
        if cur is None:
            partners = f" beside {', '.join(p.partners)}" if p.partners else " alone"
            out.append(
                Action(
                    ActionKind.ADMIT,
                    p.job_id,
                    f"admitted on {where}{partners} at {p.knobs.short()}: {p.throughput:.4g} "
                    f"(floor {p.floor:g}, predicted slowdown {p.predicted_slowdown:.2f})",
                    to_knobs=p.knobs,
                    to_gpus=p.gpus,
                )
            )
            continue
        if specs is None:
            specs = {j.id: j for j in inp.jobs}
        spec = specs[p.job_id]
        kind = change_kind(spec.knob_space, cur.knobs, p.knobs)  # type: ignore[attr-defined]
        moved = sorted(cur.gpus) != sorted(p.gpus)
        if moved:
            out.append(
                Action(
                    ActionKind.MIGRATE,
                    p.job_id,
                    f"moves {','.join(cur.gpus)} -> {where}"
                    + (f" and switches to {p.knobs.short()}" if kind else "")
                    + (f" (now beside {', '.join(p.partners)})" if p.partners else " (now alone)"),
                    change=kind,
                    from_knobs=cur.knobs,
                    to_knobs=p.knobs,
                    from_gpus=cur.gpus,
                    to_gpus=p.gpus,
                )
            )
        elif kind is not None:
            changed = sorted(k for k, v in p.knobs.items if cur.knobs.get(k) != v)
            out.append(
                Action(
                    ActionKind.SWITCH,
                    p.job_id,
                    f"{kind.label}: {', '.join(f'{k} {cur.knobs.get(k)}->{p.knobs.get(k)}' for k in changed)}",
                    change=kind,
                    from_knobs=cur.knobs,
                    to_knobs=p.knobs,
                    from_gpus=cur.gpus,
                    to_gpus=p.gpus,
                )
            )
        else:
            out.append(Action(ActionKind.KEEP, p.job_id, "unchanged", from_knobs=cur.knobs, to_knobs=p.knobs,
                              from_gpus=cur.gpus, to_gpus=p.gpus))
    for q in queued:
        cur = inp.running.get(q.job_id)
        if cur is not None or q.code is QueueCode.PREEMPTED:
            out.append(Action(ActionKind.PREEMPT, q.job_id, q.reason, from_knobs=cur.knobs if cur else None,
                              from_gpus=cur.gpus if cur else ()))
        else:
            out.append(Action(ActionKind.HOLD, q.job_id, f"{q.code.value}: {q.reason}"))
    return tuple(out)
