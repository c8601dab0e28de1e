"""The action diff: what must change to move the cluster from its current state to a plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

from elastico_core.model.knobs import Knobs, change_kind
from elastico_core.model.plan import Action, ActionKind, Placement, QueueCode, Queued

if TYPE_CHECKING:
    from elastico_core.pds.planner import PlanningInput


_KEEPS: dict[str, Action] = {}  # per job, its last KEEP action: epochs mostly keep what runs


def _keep(job_id: str, knobs: Knobs, gpus: tuple[str, ...]) -> Action:
    hit = _KEEPS.get(job_id)
    if hit is None or hit.from_knobs is not knobs or hit.from_gpus != gpus:
        if len(_KEEPS) >= 65536:
            _KEEPS.clear()
        hit = _KEEPS[job_id] = Action(
            ActionKind.KEEP, job_id, "unchanged", from_knobs=knobs, to_knobs=knobs, from_gpus=gpus, to_gpus=gpus
        )
    return hit


def diff_actions(inp: PlanningInput, placements: tuple[Placement, ...], queued: tuple[Queued, ...]) -> tuple[Action, ...]:
    """One action per known job: admit, switch (classified, §5.7), migrate, keep, hold or preempt."""
    specs: dict[str, object] | None = None
    out: list[Action] = []
    for p in placements:
        cur = inp.running.get(p.job_id)
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
        if (cur.knobs is p.knobs or cur.knobs == p.knobs) and cur.gpus == p.gpus:
            out.append(_keep(p.job_id, cur.knobs, cur.gpus))
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
