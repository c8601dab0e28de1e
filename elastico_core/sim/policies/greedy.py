"""Greedy first-fit with reshaping: ElastiCo without ESP (§5.3's "w/o ESP" ablation).

RST and IAC stay, the market goes: queued jobs are taken in FIFO order (simultaneous arrivals
largest request first — memory, then SM share: first-fit decreasing) and each takes the highest-throughput configuration of
its space that meets its floor and fits *somewhere now*, first-fit over the GPUs in cluster order,
beside at most one partner, within the SM capacity, and only where the predictor says neither job
slows beyond its tolerance tau_j = min(tau_default, T_j/L_j). Running jobs keep their configuration
and GPUs (no coordinated reconfiguration), and nothing is reserved for the queue.

This is exactly the behaviour Case 2 of §5.4 describes: early jobs grab their peak configurations,
later ones find no room, although a coordinated choice would have fitted everyone.

On a cluster with queues it admits as Kueue does (``policies/quota.py``): a configuration its queue's
quota (nominal + borrowing limit, the cohort's unused quota) does not cover is skipped; nothing is reclaimed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.iac.thresholds import ThresholdConfig
from elastico_core.model.job import gang_size
from elastico_core.model.knobs import Knobs, cartesian
from elastico_core.model.profile import Profile
from elastico_core.model.workload import Workload
from elastico_core.pds.board import EPS
from elastico_core.pds.interference import PairMemo
from elastico_core.sim.policies.common import Boards, slowdown
from elastico_core.sim.policies.quota import attach_quota
from elastico_core.sim.policy import ClusterSnapshot, Decision, JobView, PolicyContext, PolicyKind
from elastico_core.sim.profiles import ProfileBook
from elastico_core.sim.queues import Charging


@dataclass(frozen=True, slots=True)
class GreedyConfig:
    sm_capacity: float = 1.0  # the planner's default, so the ablation differs from ElastiCo only in ESP
    reshape: bool = True  # False: every job keeps its requested configuration (plain first-fit packing)
    thresholds: ThresholdConfig = field(default_factory=ThresholdConfig)


@dataclass
class GreedyPolicy:
    predictor: SlowdownPredictor
    config: GreedyConfig = GreedyConfig()
    kind: PolicyKind = PolicyKind.GREEDY
    event_driven: bool = True
    _pairs: PairMemo | None = field(default=None, repr=False)
    _boards: Boards | None = field(default=None, repr=False)
    _options: dict[tuple[str, object, float], tuple[tuple[Knobs, Profile], ...]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_context(cls, ctx: PolicyContext) -> GreedyPolicy:
        return cls(ctx.predictor)

    @property
    def charging(self) -> Charging:
        """How its admission charges a queue (``sim/queues.py``): a share of each GPU."""
        return Charging(sm_capacity=self.config.sm_capacity)

    def options(self, job: JobView, book: ProfileBook) -> tuple[tuple[Knobs, Profile], ...]:
        """The job's configurations meeting its floor, fastest first, dominated ones dropped."""
        key = (job.spec.workload.name, job.spec.knob_space if self.config.reshape else job.default_knobs, job.spec.floor)
        hit = self._options.get(key)
        if hit is None:
            rows = []
            for knobs in cartesian(job.spec.knob_space) if self.config.reshape else (job.default_knobs,):
                p = book.profile(job.spec.workload, knobs)
                if p is not None and p.throughput >= job.spec.floor:
                    rows.append((knobs, p))
            rows.sort(key=lambda r: (-r[1].throughput, r[1].resources.gpu_mem_mib, gang_size(r[0])))
            kept: list[tuple[Knobs, Profile]] = []
            best_mem: dict[int, float] = {}
            for knobs, p in rows:  # keep a slower option only if it needs less memory at its degree
                dp = gang_size(knobs)
                if p.resources.gpu_mem_mib < best_mem.get(dp, float("inf")) - 1e-6:
                    kept.append((knobs, p))
                    best_mem[dp] = p.resources.gpu_mem_mib
            hit = tuple(kept)
            self._options[key] = hit
        return hit

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        if self._boards is None:
            self._boards = Boards(self.config.sm_capacity)
        seats = self._boards.of(snapshot)
        board = seats.board
        quota = attach_quota(snapshot, seats)  # Kueue's admission on a cluster with queues
        book = snapshot.profiles
        if self._pairs is None:
            self._pairs = PairMemo(self.predictor)
        pending = sorted(snapshot.pending(), key=lambda j: (-j.spec.priority, j.spec.submit_time_s, *self._size(j, book), j.id))
        if not pending:
            return Decision(seats.assignments())
        views = seats.views
        # Candidate GPUs hold at most one job (max_jobs_per_gpu is 2): label each by its occupant's
        # (profile, tolerance) "class" so the IAC verdict is computed once per class, not per GPU.
        classes: list[tuple[JobView, Profile, float]] = []
        class_of: dict[tuple[int, float], int] = {}
        occ = np.full(len(board.gpu_ids), -1, dtype=np.int64)
        for g, on in enumerate(board.occ):
            if len(on) == 1:
                occ[g] = self._class(views[on[0]], book, classes, class_of)
            elif on:
                occ[g] = -2  # full (or, with more than two per GPU, checked one by one)
        # the board's free capacity as arrays (candidates are filtered in bulk), kept in step below
        mem_free = np.array(board.free_mem, dtype=float)
        sm_free = np.array(board.free_sm, dtype=float)
        count = np.array([len(on) for on in board.occ])
        node_of = np.array(board.gpu_node)
        cpu_free = np.array(board.node_free_cpu, dtype=float)
        host_free = np.array(board.node_free_host, dtype=float)
        most = board.max_per_gpu
        room = float(mem_free[count < most].max(initial=0.0))
        for job in pending:
            for knobs, prof in self.options(job, book):
                d = seats.demand(prof, gang_size(knobs))
                if d.mem > room + EPS or knobs in job.oom_knobs:
                    continue
                if quota is not None and not quota.admits(self._boards.job(job.id), d):
                    continue  # its queue's quota: a smaller configuration may still be admitted
                cands = np.flatnonzero(
                    (count < most) & (mem_free >= d.mem - EPS) & (sm_free >= d.sm - EPS)
                    & (cpu_free[node_of] >= d.cpu - EPS) & (host_free[node_of] >= d.host - EPS)
                )
                if len(cands) < d.dp:
                    continue
                tau = self._tau(prof, job)
                oc = occ[cands]
                good = oc == -1
                for c in np.unique(oc[oc >= 0]):
                    if self._safe(job, prof, tau, *classes[int(c)], book):
                        good |= oc == c
                if (oc == -2).any():  # more than two jobs per GPU allowed: check those GPUs in full
                    for i in np.flatnonzero(oc == -2):
                        g = int(cands[i])
                        good[i] = all(self._safe(job, prof, tau, *classes[self._class(views[x], book, classes, class_of)], book)
                                      for x in board.occ[g])
                hits = cands[good]
                if len(hits) < d.dp:
                    continue
                gpus = self._pick(hits, node_of, d.dp)
                if not seats.place(job, knobs, d, gpus).ok:  # a node lacks CPU or host memory for the gang
                    continue
                me = self._class(job, book, classes, class_of, prof)
                for g in gpus:
                    mem_free[g] = board.free_mem[g]
                    sm_free[g] = board.free_sm[g]
                    count[g] += 1
                    occ[g] = me if count[g] == 1 else -2 if count[g] >= most or most > 2 else occ[g]
                    n = board.gpu_node[g]
                    cpu_free[n] = board.node_free_cpu[n]
                    host_free[n] = board.node_free_host[n]
                room = float(mem_free[count < most].max(initial=0.0))
                break
        return Decision(seats.assignments())

    def _class(
        self, v: JobView, book: ProfileBook, classes: list[tuple[JobView, Profile, float]],
        class_of: dict[tuple[int, float], int], prof: Profile | None = None,
    ) -> int:
        if prof is None:
            assert v.knobs is not None
            prof = book.profile(v.spec.workload, v.knobs)
            assert prof is not None
        tau = self._tau(prof, v)
        key = (id(prof), tau)
        c = class_of.get(key)
        if c is None:
            c = class_of[key] = len(classes)
            classes.append((v, prof, tau))
        return c

    @staticmethod
    def _pick(hits: np.ndarray, node_of: np.ndarray, dp: int) -> tuple[int, ...]:
        """First-fit: the first ``dp`` passing GPUs of one node when a node has enough, else the first ``dp``."""
        if dp == 1:
            return (int(hits[0]),)
        by_node: dict[int, list[int]] = {}
        for g in hits:
            lst = by_node.setdefault(int(node_of[g]), [])
            lst.append(int(g))
            if len(lst) == dp:
                return tuple(lst)
        return tuple(int(g) for g in hits[:dp])

    @staticmethod
    def _size(job: JobView, book: ProfileBook) -> tuple[float, float]:
        """First-fit decreasing key: the request's memory, then its SM share, largest first."""
        p = book.profile(job.spec.workload, job.default_knobs)
        return (-p.resources.gpu_mem_mib, -p.resources.sm) if p else (0.0, 0.0)

    def _tau(self, prof: Profile, job: JobView) -> float:
        base = self.config.thresholds.tau_default
        return min(base, prof.throughput / job.spec.floor) if job.spec.floor > 0 else base

    def _safe(self, job: JobView, prof: Profile, tau: float, other: JobView, theirs: Profile, tau_other: float,
              book: ProfileBook) -> bool:
        assert self._pairs is not None
        mem = float(book.gpu.memory_mib)
        w: Workload = job.spec.workload
        if slowdown(self._pairs, w, prof, other.spec.workload, theirs, mem) > tau + 1e-9:
            return False
        return slowdown(self._pairs, other.spec.workload, theirs, w, prof, mem) <= tau_other + 1e-9
