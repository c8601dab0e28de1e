"""The planner's board as the heuristic policies (Volcano-, Lucid-like, greedy) use it.

The baselines place on ``pds.board.Board``, the planner's own, so every policy of the simulator is
held to the same capacity checks (GPU memory less M_sys, SM share, jobs per GPU, node CPU and host
memory). The board indexes jobs by int; ``Boards`` and ``Seats`` are the one place that maps job ids
to those indexes and back to the ``Assignment`` the simulator reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elastico_core.model.cluster import Cluster
from elastico_core.model.knobs import Knobs
from elastico_core.model.profile import Profile
from elastico_core.model.state import Assignment
from elastico_core.model.workload import Workload
from elastico_core.pds.board import Board, Demand, Layout, Statement, Status
from elastico_core.pds.interference import PairMemo
from elastico_core.sim.policy import ClusterSnapshot, JobView

NO_OPTION = 0  # the board's option slot: a baseline names a job's configuration by its knobs instead


def slowdown(memo: PairMemo, wa: Workload, pa: Profile, wb: Workload, pb: Profile, gpu_mem: float) -> float:
    """S(a|b), at least 1: a baseline takes a prediction below 1 (or not finite) as "no slowdown"."""
    value = memo.slowdown(wa, pa, wb, pb, gpu_mem)
    return value if np.isfinite(value) and value >= 1.0 else 1.0


@dataclass
class Seats:
    """One decision's view of the board: its placements go through ``tx`` (tentative, undone before
    the next decision reads the snapshot again), and job ids map to the board's job indexes here.

    ``chosen`` holds every job's Assignment by id: the running ones as they run (the same objects, so
    the simulator sees them unchanged) and the ones placed by this decision.
    """

    board: Board
    tx: Statement
    model: int  # the board's index of the snapshot's GPU model (the one the profiles are for)
    whole_mem: float  # one such GPU's usable memory
    boards: Boards  # hands out board jobs for job ids
    views: dict[int, JobView]  # board job -> view, for the jobs on the board
    chosen: dict[str, Assignment]

    def demand(self, prof: Profile, dp: int) -> Demand:
        r = prof.resources
        return Demand(r.gpu_mem_mib, r.sm, r.cpu_cores, r.host_mem_mib, dp, self.model)

    def whole(self, prof: Profile, dp: int) -> Demand:
        """A request for ``dp`` whole GPUs (all memory and SM share), with the job's node CPU and host memory."""
        r = prof.resources
        return Demand(self.whole_mem, self.board.cap_sm, r.cpu_cores, r.host_mem_mib, dp, self.model)

    def empty(self) -> int:
        return self.board.empty_count(self.model)

    def place(self, job: JobView, knobs: Knobs, d: Demand, gpus: tuple[int, ...]) -> Status:
        """Tentatively place ``job`` at ``knobs`` (``Board.try_place``'s answer); recorded as its assignment when it fits."""
        i = self.boards.job(job.id)
        status = self.tx.place(i, NO_OPTION, d, gpus)
        if status.ok:
            ids = self.board.gpu_ids
            self.views[i] = job
            self.chosen[job.id] = Assignment(job.id, knobs, tuple(ids[g] for g in gpus))
        return status

    def assignments(self) -> tuple[Assignment, ...]:
        return tuple(self.chosen[k] for k in sorted(self.chosen))


class Boards:
    """One board per baseline, kept across decisions in step with the snapshots.

    Rebuilding a 512-GPU board for every decision would cost more than the decision, and between two
    decisions only a few jobs start or finish: ``of`` applies that difference (by each running job's
    Assignment) and opens a Statement for the decision's placements, which the next call discards
    first, so the board always starts a decision as the snapshot's occupancy at profile figures.
    """

    def __init__(self, sm_capacity: float = 1.0) -> None:
        self.sm_capacity = sm_capacity
        self._board: Board | None = None
        self._tx: Statement | None = None
        self._index: dict[str, int] = {}  # job id -> board job
        self._next = 0  # the next board job to hand out
        self._held: dict[int, Assignment] = {}  # board job -> the Assignment it is on the board as

    def _fresh(self, cluster: Cluster) -> Board:
        self._board = Board(Layout.of(cluster, self.sm_capacity))
        self._tx = None
        self._index.clear()
        self._held.clear()
        return self._board

    def job(self, job_id: str) -> int:
        """The board job of ``job_id`` (a new one the first time it is asked)."""
        i = self._index.get(job_id)
        if i is None:
            i = self._index[job_id] = self._next
            self._next += 1
        return i

    def of(self, snapshot: ClusterSnapshot) -> Seats:
        """The current occupancy: every running job on its GPUs at its configuration's profile figures."""
        board = self._board
        if board is None or board.cluster is not snapshot.cluster:
            board = self._fresh(snapshot.cluster)
        board.quota = None  # a decision's quota ledger (``policies/quota.py``) is its own
        if self._tx is not None:
            self._tx.discard()
        layout = board.layout
        model = layout.model_index[snapshot.profiles.gpu.name]
        held = self._held
        views: dict[int, JobView] = {}
        chosen: dict[str, Assignment] = {}
        arrived: list[tuple[int, JobView]] = []
        for v in snapshot.placed():
            cur = v.current
            if cur is None:
                continue
            i = self.job(v.id)
            views[i] = v
            chosen[v.id] = cur
            was = held.get(i)
            if was is not cur and (was is None or was.knobs is not cur.knobs or was.gpus != cur.gpus):
                arrived.append((i, v))
        moved = {i for i, _ in arrived}
        for i in [i for i in held if i not in views or i in moved]:  # finished, preempted or moved
            board.remove(i)
            del held[i]
        gpu_index = layout.gpu_index
        for i, v in arrived:
            cur = v.current
            assert cur is not None
            prof = snapshot.profiles.profile(v.spec.workload, cur.knobs)
            cpu, host = (prof.resources.cpu_cores, prof.resources.host_mem_mib) if prof is not None else (0.0, 0.0)
            board.place(i, NO_OPTION, Demand(v.mem_mib, v.sm, cpu, host, len(cur.gpus), model), [gpu_index[g] for g in cur.gpus])
            held[i] = cur
        if len(self._index) > 2 * len(held) + 4096:  # forget jobs long gone
            self._index = {jid: i for jid, i in self._index.items() if i in held}
        self._tx = board.tentative()
        whole_mem = snapshot.cluster.usable_mem_mib(snapshot.profiles.gpu)
        return Seats(board, self._tx, model, whole_mem, self, views, chosen)
