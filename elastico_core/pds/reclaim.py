"""Reclaim: at the last epoch of a reclaim (``pds/quotas.py``, step 5), which borrowers are set free or
re-paired so that the jobs owed their queue's nominal quota find it, and what each borrower is told."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

from elastico_core.pds.board import Board, Layout
from elastico_core.pds.quotas import TOL, QuotaEpoch, QuotaLayout, Reclaim


def victim_order(ids: Sequence[str], priority: Sequence[int], submit: Sequence[float], rows: Sequence[int]) -> list[int]:
    """Kueue's order of preemption candidates: lowest priority first, then the most recently submitted."""
    return sorted(rows, key=lambda j: (priority[j], -submit[j], ids[j]))


def plan_reclaim(
    qe: QuotaEpoch, layout: Layout, owed: Sequence[int], current_gpus: Mapping[int, tuple[int, ...]],
    priority: Sequence[int], submit: Sequence[float],
) -> Reclaim:
    """At the last epoch of a reclaim (module doc, step 5): which borrowers to set free or re-pair.

    ``owed``: the rows owed at their deadline, in queue order. First the quota: every queue of their
    cohorts above its cap loses jobs until its remaining jobs' least charges fit the cap (reshaping does
    the rest). Then the GPUs: on a trial board of everything still running, each owed job at its least
    charge must find GPUs; while it does not, the next candidate of a queue holding more than its nominal
    quota (above its cap first) is re-paired beside another job when it runs alone on one GPU (then anyone
    alone on a GPU: re-pairing changes no quota), else set free. Charges do not tile GPUs exactly (a job
    charged 0.75 of a GPU may leave a remainder no job fits), so a borrower within its share may still hold
    what the owed job needs. Interference of a re-paired job is checked by the epoch's IAC rounds. The
    owed job is then planned as if it ran on the GPUs found (``Reclaim.admitted``).
    """
    lay, t, ent = qe.lay, qe.table, qe.ent
    n_q = lay.n_queues
    ids = t.job_ids
    owed_q = {int(qe.queue_of[o]) for o in owed}
    cohorts = {int(lay.cohort[q]) for q in owed_q if lay.cohort[q] >= 0}
    over = [q for q in range(n_q) if qe.over[q]]
    # held to their caps: the borrowers of the owed queues' cohorts (all queues above their caps when an
    # owed queue has no cohort: they hold the capacity no queue names, which is everyone's)
    deadline = frozenset(q for q in over if not cohorts or int(lay.cohort[q]) in cohorts or lay.cohort[q] < 0)
    above = np.asarray((ent.usage > lay.nominal + TOL).reshape(n_q, -1).any(axis=1), dtype=bool)  # borrowing now
    by_queue: dict[int, list[int]] = {}
    for j in np.flatnonzero(t.running).tolist():
        q = int(qe.queue_of[j])
        if 0 <= q < n_q and above[q]:
            by_queue.setdefault(q, []).append(j)
    first = owed[0]
    by = lay.queues.queues[int(qe.queue_of[first])].name
    freed: dict[int, str] = {}
    for q in sorted(deadline):
        rows = victim_order(ids, priority, submit, by_queue.get(q, []))
        need = np.zeros((len(lay.models), 2))
        charge = {x: qe.least_charge(x) for x in rows}
        for x in rows:
            _, m, g, mm = charge[x]
            need[m] += (g, mm)
        for j in rows:
            if (need <= ent.cap[q] + TOL).all():
                break
            _, m, g, mm = charge[j]
            need[m] -= (g, mm)
            freed[j] = reclaim_reason(lay, qe, q, by, ids[first], "quota")
    board = Board(layout)  # what still runs, where it runs
    keep = [j for j in current_gpus if j not in freed]
    cur = t.current
    board.place_many([(j, int(cur[j]), t.sets[j].demands[int(cur[j])], current_gpus[j]) for j in keep])
    # every queue holding more than its nominal quota may lose jobs for GPUs: those above their fair share first
    borrowers = [j for q in (*over, *(q for q in range(n_q) if above[q] and not qe.over[q]))
                 for j in victim_order(ids, priority, submit, by_queue.get(q, [])) if j not in freed]
    others = victim_order(ids, priority, submit, [j for j in keep if j not in set(borrowers)])
    movable = [*borrowers, *others]  # re-pairing changes no quota: borrowers first, then anyone alone on a GPU
    moved: dict[int, tuple[int, ...]] = {}
    admitted: dict[int, tuple[int, ...]] = {}
    least = dict(zip(owed, qe.least_of(list(owed)).tolist(), strict=True))
    for o in owed:
        d = t.sets[o].demands[least[o]]
        while board.find_gang(d) is None:
            if _repair_one(board, movable, moved):
                continue
            while borrowers and borrowers[0] not in board.where:
                borrowers.pop(0)
            if not borrowers:
                break
            c = borrowers.pop(0)
            board.remove(c)
            moved.pop(c, None)
            freed[c] = reclaim_reason(lay, qe, int(qe.queue_of[c]), by, ids[first], "gpus")
        gang = board.find_gang(d)
        if gang is not None:
            board.place(o, least[o], d, gang)
            admitted[o] = gang
    return Reclaim(
        MappingProxyType({ids[j]: why for j, why in freed.items()}),
        MappingProxyType({ids[j]: tuple(layout.gpu_ids[g] for g in gs) for j, gs in moved.items() if j not in freed}),
        deadline,
        MappingProxyType({ids[o]: (t.sets[o].knobs[least[o]], tuple(layout.gpu_ids[g] for g in gs)) for o, gs in admitted.items()}),
    )


def _repair_one(board: Board, movable: list[int], moved: dict[int, tuple[int, ...]]) -> bool:
    """Move the first job of ``movable`` that runs alone on one GPU beside another job, freeing its GPU."""
    for i, c in enumerate(movable):
        entry = board.where.get(c)
        if entry is None or len(entry[2]) != 1 or len(board.occ[entry[2][0]]) != 1:
            continue
        k, dc, gpus = entry
        with board.tentative() as tx:
            tx.remove(c)
            h = board.find_single(dc)
            if h is not None and h != gpus[0] and board.occ[h] and tx.place(c, k, dc, (h,)).ok:
                tx.commit()
                moved[c] = (h,)
                del movable[i]
                return True
    return False


def reclaim_reason(lay: QuotaLayout, qe: QuotaEpoch, q: int, by: str, job: str, what: str) -> str:
    name = lay.queues.queues[q].name
    held = float(qe.ent.usage[q, :, 0].sum())
    cap = float(qe.ent.cap[q, :, 0].sum())
    nominal = float(lay.nominal[q, :, 0].sum())
    lack = "GPUs for it" if what == "gpus" else "the quota it lent"
    return (f"reclaimed by queue {by} for job {job} (owed its nominal quota for {lay.queues.reclaim_epochs} epochs): "
            f"{name} held {held:.1f} GPUs of nominal {nominal:g}, entitled to {cap:.1f} now; {by} needed {lack} back; "
            "checkpointed and requeued")
