"""Lucid-like: non-intrusive, interference-class packing of training jobs (Hu et al., ASPLOS'23 [10]).

How it follows Lucid's rules (paper, and ``simulation/policy/lucid.py`` of its public artifact):

* **Non-intrusive profiling classes.** Lucid's packing-analysis model labels a job 0 / 1 / 2 (tiny,
  medium, jumbo) by its average co-located speed over profiled pairs: >= 0.95 -> 0, >= 0.85 -> 1,
  else 2. Here the "profiled pairs" are the policy's interference predictor applied to the job's
  default configuration against the default configuration of every training workload of the zoo.
* **Indolent (adaptive) packing.** Packing is switched on only while the cluster is contended (Lucid's
  prescient adaptive sharing turns it off when predicted load is low): here, while the queued jobs ask
  for more GPUs than are free. With packing off Lucid allocates in order and stops at the first job
  that does not fit; with packing on it tries a partner first, then whole GPUs, and skips misfits.
* **Pair rule** (``job_pair_picker_time_aware``). A queued training job may join a running training job
  that runs alone, asks for the same number of GPUs, leaves room in memory, whose class sum is <= 2,
  and whose priority is at least half the newcomer's (``priority_new <= 2 x priority_partner``).
  Pairs only: a shared job is not shared again.
* **Priority.** Estimated duration x GPUs, smallest first (Lucid's workload-estimate model; the
  simulator supplies a seeded noisy runtime estimate of each job).
* **No reshaping.** Jobs run at their default configuration; Lucid does not touch intra-job knobs.
  Inference jobs are scheduled on whole GPUs like any job but never packed (Lucid packs training).
* **Placement.** Consolidated: the fullest node with enough free GPUs, else whole nodes.
* Not modelled: Lucid's separate profiling cluster (jobs are assumed profiled on arrival), its
  resource-orchestrator scaling of that cluster, and its throughput-forecast model.
* After an out-of-memory crash, a job (and its partner) is never packed again: Lucid learns the real
  footprint from the failure.
* On a cluster with queues it admits as Kueue does (``policies/quota.py``): a job its queue's quota does
  not cover is skipped (it never blocks other queues' jobs); nothing is reclaimed.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.model.state import Assignment
from elastico_core.model.workload import JobKind, Workload
from elastico_core.pds.interference import PairMemo
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.sim.policies.common import Boards, slowdown
from elastico_core.sim.policies.quota import attach_quota
from elastico_core.sim.policy import ClusterSnapshot, Decision, JobStatus, JobView, PolicyContext, PolicyKind
from elastico_core.sim.profiles import ProfileBook
from elastico_core.sim.queues import Charging


@dataclass(frozen=True, slots=True)
class LucidConfig:
    tiers: tuple[float, float] = (0.95, 0.85)  # average decay at which the class becomes 1, then 2
    max_class_sum: int = 2
    time_aware: float = 2.0  # newcomer priority <= time_aware x partner priority


@dataclass
class LucidPolicy:
    predictor: SlowdownPredictor
    config: LucidConfig = LucidConfig()
    kind: PolicyKind = PolicyKind.LUCID
    event_driven: bool = True
    _pairs: PairMemo | None = field(default=None, repr=False)
    # SM share is no limit here: Lucid's packed jobs time-slice their GPUs (memory and slots still are)
    _boards: Boards = field(default_factory=lambda: Boards(sm_capacity=float("inf")), repr=False)
    _classes: dict[str, int] = field(default_factory=dict, repr=False)

    @classmethod
    def from_context(cls, ctx: PolicyContext) -> LucidPolicy:
        return cls(ctx.predictor)

    @property
    def charging(self) -> Charging:
        """How its admission charges a queue (``sim/queues.py``): memory and slots (its pairs time-slice SMs)."""
        return Charging(sm_capacity=float("inf"))

    def share_class(self, workload: Workload, book: ProfileBook) -> int:
        """Lucid's 0/1/2 label of a workload's default configuration (module doc)."""
        if workload.name in self._classes:
            return self._classes[workload.name]
        if self._pairs is None:
            self._pairs = PairMemo(self.predictor)
        mine = book.profile(workload, workload.defaults)
        decays = []
        for other in PAPER_WORKLOADS.values():
            if other.kind is not JobKind.TRAIN:
                continue
            theirs = book.profile(other, other.defaults)
            if mine is None or theirs is None:
                continue
            decays.append(1.0 / slowdown(self._pairs, workload, mine, other, theirs, float(book.gpu.memory_mib)))
        avg = float(np.mean(decays)) if decays else 0.0
        label = 0 if avg >= self.config.tiers[0] else 1 if avg >= self.config.tiers[1] else 2
        self._classes[workload.name] = label
        return label

    @staticmethod
    def priority(j: JobView) -> float:
        return j.estimated_duration_s * j.dp

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        seats = self._boards.of(snapshot)
        board = seats.board
        quota = attach_quota(snapshot, seats)  # Kueue's admission on a cluster with queues
        book = snapshot.profiles
        pending = sorted(snapshot.pending(), key=lambda j: (self.priority(j), j.spec.submit_time_s, j.id))
        if not pending:
            return Decision(seats.assignments())
        packing = sum(j.dp for j in pending) > seats.empty()
        index = board.gpu_index
        # Lucid's run list: training jobs alone on their GPUs, in start order, indexed by (GPUs, class)
        alone: dict[tuple[int, int], list[tuple[float, str, JobView]]] = {}
        if packing:
            for j in snapshot.placed():
                if j.spec.kind is JobKind.TRAIN and not j.oom_knobs and all(len(board.occ[index[g]]) == 1 for g in j.gpus):
                    key = (j.dp, self.share_class(j.spec.workload, book))
                    alone.setdefault(key, []).append((j.first_start_s or 0.0, j.id, j))
            for lst in alone.values():
                lst.sort(key=lambda x: (x[0], x[1]))
        for job in pending:
            placed = False
            prof = book.profile(job.spec.workload, job.default_knobs)
            assert prof is not None
            d = seats.demand(prof, job.dp)
            if quota is not None and not quota.admits(self._boards.job(job.id), d):
                continue  # its queue's quota: skipped, never blocking the other queues' jobs
            if packing and job.spec.kind is JobKind.TRAIN and not job.oom_knobs:
                for key, _, _, partner in self._partners(job, alone, book):
                    if seats.place(job, job.default_knobs, d, tuple(index[g] for g in partner.gpus)).ok:
                        alone[key].remove(next(e for e in alone[key] if e[1] == partner.id))
                        placed = True
                        break
            if not placed:
                gpus = board.whole_gpus(d)
                if gpus is not None and seats.place(job, job.default_knobs, d, gpus).ok:
                    if packing and job.spec.kind is JobKind.TRAIN:
                        key = (job.dp, self.share_class(job.spec.workload, book))
                        ids = tuple(board.gpu_ids[g] for g in gpus)
                        alone.setdefault(key, []).append((snapshot.time_s, job.id, _as_running(job, ids)))
                    placed = True
            if not placed and not packing:
                break  # without packing Lucid keeps strict order
        return Decision(seats.assignments())

    def _partners(
        self, job: JobView, alone: dict[tuple[int, int], list[tuple[float, str, JobView]]], book: ProfileBook,
    ) -> Iterator[tuple[tuple[int, int], float, str, JobView]]:
        """The running jobs the newcomer may pair with by Lucid's class and time-aware priority rules
        (``job_pair_picker_time_aware``), earliest started first; the board then says which fits."""
        cls = self.share_class(job.spec.workload, book)
        mine = self.priority(job)
        rule = self.config.time_aware

        def allowed(key: tuple[int, int]) -> Iterator[tuple[tuple[int, int], float, str, JobView]]:
            return ((key, start, jid, other) for start, jid, other in alone.get(key, ()) if mine <= rule * self.priority(other))

        lists = [allowed((job.dp, c)) for c in range(self.config.max_class_sum - cls + 1)]
        return heapq.merge(*lists, key=lambda e: (e[1], e[2]))


def _as_running(job: JobView, gpus: tuple[str, ...]) -> JobView:
    """A pending job just placed alone, as a packing candidate for later jobs of the same decision."""
    return replace(job, status=JobStatus.RUNNING, current=Assignment(job.id, job.default_knobs, gpus))
