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
* **Queues** (a cluster with queues): the ``proportion`` plugin and the ``reclaim`` action
  (``policies/quota.py``). Each queue deserves its guarantee (nominal quota) and a weighted share of the
  rest, capped by its request and its capability (nominal + borrowing limit); jobs are taken in order as
  above, a queue's only while it holds less than it deserves and within its capability. A job that does not
  fit while its queue is below its deserved share reclaims GPUs from queues above theirs (lowest
  priority, most recently started first, a victim's queue never falling below its deserved share).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from elastico_core.pds.board import Demand
from elastico_core.sim.policies.common import Boards, Seats
from elastico_core.sim.policies.quota import TOL, capability, deserved, queue_gpus
from elastico_core.sim.policy import ClusterSnapshot, Decision, JobView, PolicyContext, PolicyKind
from elastico_core.sim.queues import Charging


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

    charging = Charging(whole_gpus=True)  # how its queues are charged (``sim/queues.py``): whole GPUs

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        seats = self._boards.of(snapshot)
        if snapshot.cluster.queues:
            return self._proportion(snapshot, seats)
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

    def _proportion(self, snapshot: ClusterSnapshot, seats: Seats) -> Decision:
        """Allocate (and reclaim) by Volcano's ``proportion`` plugin (module doc)."""
        board = seats.board
        names = {n: i for i, n in enumerate(snapshot.cluster.queues.names)}
        nominal, cap, weight = capability(snapshot)
        held, asked = queue_gpus(snapshot, names)
        deserve = deserved(nominal, cap, held + asked, weight, float(len(board.gpu_ids)))
        pending = [j for j in snapshot.pending() if j.spec.queue in names]
        order = sorted(pending, key=lambda j: (-j.spec.priority, j.spec.submit_time_s, j.id))
        # reclaim candidates: placed jobs of queues above their deserved share, lowest priority and newest first
        victims = sorted((v for v in snapshot.placed() if v.spec.queue in names),
                         key=lambda v: (v.spec.priority, -(v.first_start_s or 0.0), v.id))
        for job in order:
            q = names[job.spec.queue]
            if held[q] >= deserve[q] - TOL or held[q] + job.dp > cap[q] + TOL:
                continue  # overused, or beyond its capability
            prof = snapshot.profiles.profile(job.spec.workload, job.default_knobs)
            assert prof is not None
            d = seats.whole(prof, job.dp)
            gpus = board.whole_gpus(d)
            if gpus is None:
                gpus = self._reclaim(seats, d, victims, names, held, deserve)
            if gpus is None or not seats.place(job, job.default_knobs, d, gpus).ok:
                continue
            held[q] += job.dp
        return Decision(seats.assignments())

    def _reclaim(self, seats: Seats, d: Demand, victims: list[JobView], names: dict[str, int], held: np.ndarray,
                 deserve: np.ndarray) -> tuple[int, ...] | None:
        """Evict jobs of queues above their deserved share until ``d`` fits on whole GPUs; undo if it never does."""
        board = seats.board
        taken: list[tuple[JobView, int, tuple[int, Demand, tuple[int, ...]]]] = []
        for v in list(victims):
            p = names[v.spec.queue]
            i = seats.boards.job(v.id)
            if i not in board.where or held[p] - len(v.gpus) < deserve[p] - TOL:
                continue
            taken.append((v, p, seats.tx.remove(i)))
            held[p] -= len(v.gpus)
            gpus = board.whole_gpus(d)
            if gpus is not None:
                for v2, _, _ in taken:
                    victims.remove(v2)
                    seats.chosen.pop(v2.id, None)
                    seats.views.pop(seats.boards.job(v2.id), None)
                return gpus
        for v, p, entry in reversed(taken):  # nothing fits: every victim goes back as it was
            seats.tx.place(seats.boards.job(v.id), *entry)
            held[p] += len(v.gpus)
        return None
