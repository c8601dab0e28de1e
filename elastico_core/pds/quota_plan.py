"""The planner's two calls into the quotas: ``begin`` (the epoch's quotas, and a reclaim at its deadline)
before planning, ``finish`` (why jobs wait for quota, who is owed, every queue's state) after it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from operator import attrgetter
from types import MappingProxyType
from typing import Protocol, TypeVar

import numpy as np

from elastico_core.model.job import JobSpec
from elastico_core.model.plan import Binding, Once, Plan, Prices, QueueCode, QueueStatus, Shortfall
from elastico_core.model.planning import PlanningInput
from elastico_core.model.state import Assignment
from elastico_core.pds.actions import diff_actions
from elastico_core.pds.board import Board, Layout
from elastico_core.pds.options import EpochTable
from elastico_core.pds.quota_reasons import model_reasons, relabel, statuses, unknown_reason
from elastico_core.pds.quotas import TOL, QuotaEpoch, QuotaLayout
from elastico_core.pds.reclaim import plan_reclaim, reclaim_reason


class PreparedLike(Protocol):
    """What the planner's ``Prepared`` holds that the quotas read."""

    @property
    def table(self) -> EpochTable: ...
    @property
    def specs(self) -> tuple[JobSpec, ...]: ...
    @property
    def current_gpus(self) -> dict[int, tuple[int, ...]]: ...


P = TypeVar("P", bound=PreparedLike)
_QUEUE = attrgetter("queue")  # each job's queue name, read in C (thousands of jobs an epoch)


def begin(inp: PlanningInput, prep: P, layout: Layout, prepare: Callable[[PlanningInput], P],
          known: QuotaLayout | None = None) -> tuple[QuotaEpoch, P]:
    """The epoch's quotas over ``prep``; at the last epoch of a reclaim, the table again with the jobs it
    set free pending and the jobs it re-paired on their new GPUs (``Reclaim``). ``known``: the cluster's
    ``QuotaLayout`` from an earlier epoch (reused when it is of this very layout)."""
    lay = known if known is not None and known.layout is layout else QuotaLayout.of(inp.cluster, layout)
    qe = QuotaEpoch.of(lay, prep.table, list(map(_QUEUE, prep.specs)), inp.owed)
    last = lay.queues.reclaim_epochs - 1  # epochs owed before this one, at the deadline
    if (last > 0 and not any(n >= last for n in inp.owed.values())) or not _borrowing(lay, qe.ent.usage):
        return qe, prep
    due = [j for j in _owed_rows(qe, qe.ent.usage) if inp.owed.get(prep.table.job_ids[j], 0) >= last]
    if not due:
        return qe, prep
    specs = prep.specs
    rc = plan_reclaim(qe, layout, due, prep.current_gpus, [s.priority for s in specs], [s.submit_time_s for s in specs])
    if rc.freed or rc.moved or rc.admitted:
        running = {jid: a for jid, a in inp.running.items() if jid not in rc.freed}
        for jid, gpus in rc.moved.items():
            running[jid] = Assignment(jid, running[jid].knobs, gpus)
        for jid, (knobs, gpus) in rc.admitted.items():
            running[jid] = Assignment(jid, knobs, gpus)
        prep = prepare(replace(inp, running=MappingProxyType(running)))
    qe = QuotaEpoch.of(lay, prep.table, list(map(_QUEUE, prep.specs)), inp.owed, ent=qe.ent, reclaim=rc, base_usage=qe.ent.usage)
    return qe, prep


def _owed_rows(qe: QuotaEpoch, held: np.ndarray, among: set[str] | None = None, placed: set[int] | None = None) -> list[int]:
    """Pending rows (in queue order) that fit their queue's nominal quota beside what it holds and the rows
    before them: the jobs a queue is owed while others hold more than they may."""
    t, lay = qe.table, qe.lay
    n_q = lay.n_queues
    reserved = np.zeros_like(held)
    out = []
    for j in np.flatnonzero(~t.running).tolist():
        q = int(qe.queue_of[j])
        if not 0 <= q < n_q or (placed is not None and j in placed) or (among is not None and t.job_ids[j] not in among):
            continue
        _, m, g, mm = qe.least_charge(j)
        c = np.array([g, mm])
        if (held[q, m] + reserved[q, m] + c <= lay.nominal[q, m] + TOL).all():
            reserved[q, m] += c
            out.append(j)
    return out


def _borrowing(lay: QuotaLayout, held: np.ndarray) -> bool:
    """Does some queue hold more than its nominal quota (capacity a reclaim could give back)?"""
    return bool((held > lay.nominal + TOL).any())


def finish(qe: QuotaEpoch, board: Board, plan: Plan, inp: PlanningInput) -> Plan:
    """The plan with the quota's word on every queued job, the jobs owed quota, and every queue's state."""
    lay, t, ent = qe.lay, qe.table, qe.ent
    n_q = lay.n_queues
    ids = t.job_ids
    if len(board.where) == len(ids) and not qe.reclaim.freed:  # every job placed: no one waits for quota
        nobody = np.zeros(n_q, dtype=np.intp)
        return replace(plan, owed=_NOBODY, derive_queues=partial(_states, qe, board, nobody, plan.prices))
    placed = set(board.where)
    held = qe.held_by_queue(board)
    owed_rows = set(_owed_rows(qe, held, placed=placed)) if _borrowing(lay, held) else set()
    limit = qe.limit
    reasons: dict[str, tuple[QueueCode, str, Shortfall | None]] = {}
    owed: dict[str, int] = {}
    pending = np.zeros(n_q, dtype=np.intp)
    borrowers = [lay.queues.queues[q].name for q in range(n_q) if (held[q] > lay.nominal[q] + TOL).any()]
    left = np.ones(len(ids), dtype=bool)
    left[list(placed)] = False
    for j in np.flatnonzero(left).tolist():
        jid = ids[j]
        q = int(qe.queue_of[j])
        if jid in qe.reclaim.freed:
            reasons[jid] = (QueueCode.RECLAIMED, qe.reclaim.freed[jid], None)
            continue
        if j in qe.unknown and not t.running[j]:
            text, short = unknown_reason(qe.unknown[j], lay.queues)
            reasons[jid] = (QueueCode.QUOTA, text, short)
            continue
        if not 0 <= q < n_q:
            continue
        pending[q] += 1
        _, m, g, mm = qe.least_charge(j)
        need = (g, mm)
        if t.running[j]:
            if q in qe.reclaim.deadline:
                reasons[jid] = (QueueCode.RECLAIMED, reclaim_reason(lay, qe, q, "its owners", "waiting for quota", "quota"), None)
            continue
        if j in owed_rows:
            n = int(inp.owed.get(jid, 0)) + 1
            owed[jid] = n
            name = lay.queues.queues[q].name
            text = (f"queue {name}: needs {need[0]:.1f} GPUs of {lay.models[m]}, within its nominal quota "
                    f"{lay.nominal[q, m, 0]:g} (holds {held[q, m, 0]:.1f}), which is lent to {', '.join(borrowers) or 'others'}; "
                    f"reclaiming it, epoch {min(n, lay.queues.reclaim_epochs)} of {lay.queues.reclaim_epochs}")
            reasons[jid] = (QueueCode.QUOTA, text, Shortfall(Binding.QUOTA, need[0], 0.0, f"queue {name}"))
            continue
        if (held[q, m] + np.array(need) > limit[q, m] + TOL).any():
            blocked = qe.least_by_model(j) if len(lay.models) > 1 else [(m, need)]
            if all((held[q, bm] + np.array(bn) > limit[q, bm] + TOL).any() for bm, bn in blocked):  # no model has room
                reasons[jid] = (QueueCode.QUOTA, *model_reasons(lay, q, blocked, held, limit, ent))
    queue = Once(lambda: relabel(plan.queued, reasons))  # the reasons, like the plan's, derived on first read
    return replace(plan, derive_queue=queue, derive_actions=lambda: diff_actions(inp, plan.placements, queue()),
                   owed=MappingProxyType(owed), derive_queues=lambda: statuses(qe, held, pending, plan.prices.as_dict()))


_NOBODY: Mapping[str, int] = MappingProxyType({})


def _states(qe: QuotaEpoch, board: Board, pending: np.ndarray, prices: Prices) -> tuple[QueueStatus, ...]:
    """Every queue's state, when first read (the simulator never reads it)."""
    return statuses(qe, qe.held_by_queue(board), pending, prices.as_dict())
