"""Volcano-like: the static batch scheduler ElastiCo is compared against (§5.1, [28]).

How it follows Volcano's default scheduler configuration (actions ``enqueue, allocate, backfill``;
plugins ``priority, gang, drf, binpack``):

* **Fixed requests.** Every job runs at its default configuration (``Workload.defaults``, the
  data-parallel degree it asked for) on whole GPUs; nothing is ever co-located or reshaped.
* **Gang scheduling.** A job of d GPUs is bound only when d GPUs are free at once (``gang``'s
  minAvailable = d); otherwise none of its tasks are.
* **Order.** Higher priority first (``priority``), then, when the trace names users, the user with the
  smallest dominant share of the cluster (``drf``; GPUs are the dominant resource, the share is updated
  after every binding as Volcano's event handlers do), then FIFO by submission time.
* **Allocate / backfill.** Volcano's allocate action skips a gang that does not fit and tries the next
  job (``backfill=True``, the default here). ``backfill=False`` gives strict FIFO: the first job that
  does not fit blocks the queue.
* **Placement.** Binpack: the fullest node that still has d free GPUs, else whole nodes, emptiest first
  (``Board.whole_gpus`` of the planner's board; a node must also have the CPU and host memory its
  tasks ask, as Volcano's predicates check a node's allocatable).
* **No preemption, no migration.** Running jobs keep their GPUs until they finish (the default
  configuration enables neither ``preempt`` nor ``reclaim``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from elastico_core.sim.policies.common import Boards
from elastico_core.sim.policy import ClusterSnapshot, Decision, JobView, PolicyContext, PolicyKind


@dataclass(frozen=True, slots=True)
class VolcanoConfig:
    backfill: bool = True
    drf: bool = True


class VolcanoPolicy:
    kind = PolicyKind.VOLCANO
    event_driven = True

    def __init__(self, config: VolcanoConfig = VolcanoConfig()) -> None:
        self.config = config
        self._boards = Boards()

    @classmethod
    def from_context(cls, ctx: PolicyContext) -> VolcanoPolicy:
        return cls()

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        seats = self._boards.of(snapshot)
        board = seats.board
        pending = list(snapshot.pending())
        if not pending:
            return Decision(seats.assignments())
        total = len(board.gpu_ids)
        use_drf = self.config.drf and any(j.spec.user for j in snapshot.jobs)
        share: dict[str, float] = {}
        if use_drf:
            for j in snapshot.placed():
                share[j.spec.user] = share.get(j.spec.user, 0.0) + len(j.gpus) / total

        def key(j: JobView) -> tuple[float, float, float, str]:
            return (-j.spec.priority, share.get(j.spec.user, 0.0) if use_drf else 0.0, j.spec.submit_time_s, j.id)

        heap = [(key(j), i, j) for i, j in enumerate(pending)]
        heapq.heapify(heap)
        free = seats.empty()
        while heap and free > 0:
            k, i, job = heapq.heappop(heap)
            fresh = key(job)
            if fresh != k:  # its user's share grew since it was queued: re-sort lazily
                heapq.heappush(heap, (fresh, i, job))
                continue
            prof = snapshot.profiles.profile(job.spec.workload, job.default_knobs)
            assert prof is not None
            d = seats.whole(prof, job.dp)
            gpus = board.whole_gpus(d) if job.dp <= free else None
            if gpus is None or not seats.place(job, job.default_knobs, d, gpus).ok:  # the gang does not fit
                if self.config.backfill:
                    continue
                break
            free -= job.dp
            if use_drf:
                share[job.spec.user] = share.get(job.spec.user, 0.0) + job.dp / total
        return Decision(seats.assignments())
