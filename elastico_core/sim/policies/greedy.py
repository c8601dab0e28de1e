"""Greedy first-fit with reshaping: ElastiCo without ESP (§5.3's "w/o ESP" ablation).

RST and IAC stay, the market goes: queued jobs are taken in FIFO order (simultaneous arrivals
largest request first — memory, then SM share: first-fit decreasing) and each takes the highest-throughput configuration of
its space that meets its floor and fits *somewhere now*, first-fit over the GPUs in cluster order,
beside at most one partner, within the SM capacity, and only where the predictor says neither job
slows beyond its tolerance tau_j = min(tau_default, T_j/L_j). Running jobs keep their configuration
and GPUs (no coordinated reconfiguration), and nothing is reserved for the queue.

This is exactly the behaviour Case 2 of §5.4 describes: early jobs grab their peak configurations,
later ones find no room, although a coordinated choice would have fitted everyone.
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
from elastico_core.sim.policies.common import Board, PairPredictor, Topology
from elastico_core.sim.policy import ClusterSnapshot, Decision, JobView, PolicyContext, PolicyKind
from elastico_core.sim.profiles import ProfileBook


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
    _pairs: PairPredictor | None = field(default=None, repr=False)
    _topo: Topology | None = field(default=None, repr=False)
    _options: dict[tuple[str, object, float], tuple[tuple[Knobs, Profile], ...]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_context(cls, ctx: PolicyContext) -> GreedyPolicy:
        return cls(ctx.predictor)

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
        if self._topo is None or self._topo.cluster is not snapshot.cluster:
            self._topo = Topology.of(snapshot.cluster)
        board = Board.of(snapshot, self._topo)
        book = snapshot.profiles
        if self._pairs is None:
            self._pairs = PairPredictor(self.predictor)
        pending = sorted(snapshot.pending(), key=lambda j: (-j.spec.priority, j.spec.submit_time_s, *self._size(j, book), j.id))
        if not pending:
            return Decision(board.assignments())
        by_id = {j.id: j for j in snapshot.jobs}
        # Candidate GPUs hold at most one job (max_jobs_per_gpu is 2): label each by its occupant's
        # (profile, tolerance) "class" so the IAC verdict is computed once per class, not per GPU.
        classes: list[tuple[JobView, Profile, float]] = []
        class_of: dict[tuple[int, float], int] = {}
        occ = np.full(len(board.gpu_ids), -1, dtype=np.int64)
        for g, sl in enumerate(board.slots):
            if len(sl) == 1:
                occ[g] = self._class(by_id[sl[0].job_id], book, classes, class_of)
            elif sl:
                occ[g] = -2  # full (or, with more than two per GPU, checked one by one)
        mem_free = np.array(board.mem_free, dtype=float)
        sm_used = np.array(board.sm_used, dtype=float)
        count = np.array([len(sl) for sl in board.slots])
        node_of = np.array(board.node_of)
        cap = self.config.sm_capacity
        room = board.max_free_mem()
        for job in pending:
            for knobs, prof in self.options(job, book):
                mem, sm = prof.resources.gpu_mem_mib, prof.resources.sm
                if mem > room + 1e-6 or knobs in job.oom_knobs:
                    continue
                dp = gang_size(knobs)
                cands = np.flatnonzero((count < board.max_per_gpu) & (mem_free >= mem - 1e-6) & (cap - sm_used >= sm - 1e-6))
                if len(cands) < dp:
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
                        good[i] = all(self._safe(job, prof, tau, *classes[self._class(by_id[x.job_id], book, classes, class_of)], book)
                                      for x in board.slots[g])
                hits = cands[good]
                if len(hits) < dp:
                    continue
                gpus = self._pick(hits, node_of, dp)
                board.add(job.id, knobs, gpus, mem, sm)
                me = self._class(by_id[job.id], book, classes, class_of, prof)
                for g in gpus:
                    mem_free[g] -= mem
                    sm_used[g] += sm
                    count[g] += 1
                    occ[g] = me if count[g] == 1 else -2 if count[g] >= board.max_per_gpu or board.max_per_gpu > 2 else occ[g]
                room = board.max_free_mem()
                break
        return Decision(board.assignments())

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
        if self._pairs.slowdown(w, prof, other.spec.workload, theirs, mem) > tau + 1e-9:
            return False
        return self._pairs.slowdown(other.spec.workload, theirs, w, prof, mem) <= tau_other + 1e-9
