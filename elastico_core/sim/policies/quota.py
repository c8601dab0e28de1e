"""Queues for the baselines: Kueue's admission check (greedy, Lucid-like) and Volcano's proportion plugin.

* **Quota filter** (``attach_quota``): the planner's ``QuotaLedger`` on the baseline's board, with each
  queue limited to its nominal quota plus its borrowing limit and its cohort to what its queues lend of
  what they do not use (and the capacity no queue names), exactly as Kueue admits a workload. A placement
  the quota refuses is refused like one that does not fit; nothing is ever taken back (no reclaim), and
  there is no fair sharing beyond first come, first served.
* **Proportion** (``deserved``): Volcano's ``proportion`` plugin. A queue's *deserved* share starts at its
  guarantee (its nominal quota, at most what it requests) and the rest of the cluster is dealt out by
  weight, round after round, each queue capped at min(request, capability = nominal + borrowing limit).
  A queue allocates while it holds less than it deserves and within its capability; ``reclaim`` evicts
  jobs of queues above their deserved share (as long as they stay at or above it) for a queue below it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from elastico_core.pds.quotas import QuotaLayout, QuotaLedger
from elastico_core.sim.policies.common import Seats
from elastico_core.sim.policy import ClusterSnapshot

TOL = 1e-9


def attach_quota(snapshot: ClusterSnapshot, seats: Seats, *, whole_gpus: bool = False) -> QuotaLedger | None:
    """Kueue's admission on ``seats.board`` for this decision (None on a cluster without queues): every
    running job charged to its queue, every placement of the decision checked."""
    cluster = snapshot.cluster
    board = seats.board
    board.quota = None
    if not cluster.queues:
        return None
    lay = QuotaLayout.of(cluster, board.layout, whole_gpus=whole_gpus)
    index = cluster.queues.index
    jobs = {seats.boards.job(v.id): v for v in snapshot.jobs}
    size = max(jobs, default=-1) + 1
    queue_of = np.full(size, -1, dtype=np.intp)
    for i, v in jobs.items():
        q = index(v.spec.queue)
        queue_of[i] = q if q >= 0 else lay.n_queues  # an unknown queue has no room
    limit = np.zeros((lay.n_queues + 1, len(lay.models), 2))
    limit[: lay.n_queues] = lay.nominal + lay.borrow
    ledger = QuotaLedger(lay, queue_of, limit)
    for i, (_, d, _) in board.where.items():
        if i < size:
            ledger.take(i, d)
    board.quota = ledger
    return ledger


def deserved(nominal: np.ndarray, capability: np.ndarray, request: np.ndarray, weight: np.ndarray, total: float) -> np.ndarray:
    """Volcano ``proportion``: each queue's deserved GPUs (module doc)."""
    request = np.maximum(request, 0.0)
    ceiling = np.minimum(request, capability)
    out = np.minimum(nominal, ceiling)
    for _ in range(len(out) + 1):
        left = total - out.sum()
        open_ = out < ceiling - TOL
        if left <= TOL or not open_.any():
            break
        share = np.where(open_, weight, 0.0)
        out = np.minimum(ceiling, out + left * share / share.sum())
    return out


def queue_gpus(snapshot: ClusterSnapshot, names: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Whole GPUs each queue's placed jobs hold, and its pending jobs ask (their requested degree)."""
    held = np.zeros(len(names))
    asked = np.zeros(len(names))
    for j in snapshot.jobs:
        q = names.get(j.spec.queue, -1)
        if q < 0:
            continue
        if j.placed:
            held[q] += len(j.gpus)
        else:
            asked[q] += j.dp
    return held, asked


def capability(snapshot: ClusterSnapshot) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per queue: its guarantee (nominal GPUs), its capability (nominal + borrowing limit, at most the
    cluster; the nominal quota alone without a cohort) and its weight."""
    qs = snapshot.cluster.queues
    model = snapshot.profiles.gpu.name
    total = float(len(snapshot.cluster.gpus))
    nominal = np.array([q.nominal_of(model).gpus for q in qs.queues])
    cap = np.array([min(total, q.nominal_of(model).gpus + q.borrowing_of(model).gpus) for q in qs.queues])
    return nominal, cap, np.array([q.weight for q in qs.queues])
