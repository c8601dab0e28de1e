"""A small per-decision GPU board shared by the heuristic policies (Volcano-, Lucid-like, greedy)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from elastico_core.iac.batch import PairBatch, profile_batch
from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.model.cluster import Cluster
from elastico_core.model.knobs import Knobs
from elastico_core.model.profile import Profile
from elastico_core.model.state import Assignment
from elastico_core.model.workload import Workload
from elastico_core.sim.policy import ClusterSnapshot

EPS = 1e-6


@dataclass(frozen=True, slots=True)
class Slot:
    """One job's share of one GPU as the policy sees it (profile figures, not the ground truth)."""

    job_id: str
    mem_mib: float
    sm: float


@dataclass(frozen=True, slots=True)
class Topology:
    """The static shape of a cluster: GPU ids in order, each GPU's node, each node's GPUs."""

    cluster: Cluster
    gpu_ids: tuple[str, ...]
    node_of: tuple[int, ...]
    gpus_of_node: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, cluster: Cluster) -> Topology:
        node_ix = {n.name: i for i, n in enumerate(cluster.nodes)}
        node_of = tuple(node_ix[g.node] for g in cluster.gpus)
        by_node: list[list[int]] = [[] for _ in cluster.nodes]
        for g, n in enumerate(node_of):
            by_node[n].append(g)
        return cls(cluster, tuple(g.id for g in cluster.gpus), node_of, tuple(tuple(x) for x in by_node))


@dataclass
class Board:
    """GPUs in cluster order with what each holds; ``node_of[g]`` and ``gpus_of_node[n]`` index them.

    Free memory, SM share and the count of empty GPUs are kept up to date by ``add`` so that the
    queries policies make thousands of times per decision on large clusters are O(1).
    """

    gpu_ids: tuple[str, ...]
    node_of: tuple[int, ...]
    gpus_of_node: tuple[tuple[int, ...], ...]
    usable_mib: float
    max_per_gpu: int
    slots: list[list[Slot]] = field(default_factory=list)
    placed: dict[str, Assignment] = field(default_factory=dict)
    mem_free: list[float] = field(default_factory=list)
    sm_used: list[float] = field(default_factory=list)
    n_empty: int = 0

    def __post_init__(self) -> None:
        if not self.slots:
            self.slots = [[] for _ in self.gpu_ids]
        self.mem_free = [self.usable_mib - sum((s.mem_mib for s in sl), 0.0) for sl in self.slots]
        self.sm_used = [sum((s.sm for s in sl), 0.0) for sl in self.slots]
        self.n_empty = sum(1 for sl in self.slots if not sl)

    @classmethod
    def of(cls, snapshot: ClusterSnapshot, topo: Topology | None = None) -> Board:
        """The current occupancy, from the snapshot's per-GPU job lists and the jobs' profile figures."""
        t = topo if topo is not None and topo.cluster is snapshot.cluster else Topology.of(snapshot.cluster)
        views = {j.id: j for j in snapshot.placed()}
        slots = [[Slot(jid, views[jid].mem_mib, views[jid].sm) for jid in ids] if ids else [] for ids in snapshot.gpu_jobs]
        placed = {jid: v.current for jid, v in views.items() if v.current is not None}
        return cls(
            t.gpu_ids, t.node_of, t.gpus_of_node, snapshot.cluster.usable_mem_mib(snapshot.profiles.gpu),
            snapshot.cluster.max_jobs_per_gpu, slots, placed,
        )

    def free_mem(self, g: int) -> float:
        return self.mem_free[g]

    def free_sm(self, g: int, capacity: float = 1.0) -> float:
        return capacity - self.sm_used[g]

    def empty(self, g: int) -> bool:
        return not self.slots[g]

    def add(self, job_id: str, knobs: Knobs, gpus: tuple[int, ...], mem: float, sm: float) -> None:
        for g in gpus:
            if not self.slots[g]:
                self.n_empty -= 1
            self.slots[g].append(Slot(job_id, mem, sm))
            self.mem_free[g] -= mem
            self.sm_used[g] += sm
        self.placed[job_id] = Assignment(job_id, knobs, tuple(self.gpu_ids[g] for g in gpus))

    def fits(self, g: int, mem: float, sm: float, sm_capacity: float | None) -> bool:
        if len(self.slots[g]) >= self.max_per_gpu or self.mem_free[g] < mem - EPS:
            return False
        return sm_capacity is None or sm_capacity - self.sm_used[g] >= sm - EPS

    def max_free_mem(self) -> float:
        """The most memory free on any GPU that still takes another job."""
        return max((m for m, sl in zip(self.mem_free, self.slots, strict=True) if len(sl) < self.max_per_gpu), default=0.0)

    def assignments(self) -> tuple[Assignment, ...]:
        return tuple(self.placed[k] for k in sorted(self.placed))


def whole_gpus(board: Board, count: int) -> tuple[int, ...] | None:
    """``count`` empty GPUs, consolidated: the fullest node that still has room (best fit), else
    whole nodes with the most empty GPUs first (Volcano binpack / Lucid consolidate placement)."""
    if board.n_empty < count:
        return None
    free = [[g for g in gs if board.empty(g)] for gs in board.gpus_of_node]
    fitting = [n for n, f in enumerate(free) if len(f) >= count]
    if fitting:
        n = min(fitting, key=lambda n: (len(free[n]), n))
        return tuple(free[n][:count])
    out: list[int] = []
    for n in sorted(range(len(free)), key=lambda n: (-len(free[n]), n)):
        out.extend(free[n][: count - len(out)])
        if len(out) == count:
            return tuple(out)
    return None


@dataclass
class PairPredictor:
    """Predicted slowdowns of configuration pairs through a ``SlowdownPredictor``, memoised.

    The cache holds pure function values of (workload, knobs) pairs, so it never changes a decision.
    """

    predictor: SlowdownPredictor
    # keyed by the identity of the (memoised, kept-alive) profile objects: hashing Knobs is slow
    _cache: dict[tuple[int, int, float], tuple[Profile, Profile, float]] = field(default_factory=dict, repr=False)

    def slowdown(self, wa: Workload, pa: Profile, wb: Workload, pb: Profile, gpu_mem_mib: float) -> float:
        key = (id(pa), id(pb), gpu_mem_mib)
        hit = self._cache.get(key)
        if hit is None or hit[0] is not pa or hit[1] is not pb:
            batch = PairBatch(profile_batch([(wa, pa)]), profile_batch([(wb, pb)]), np.array([gpu_mem_mib]))
            value = float(np.asarray(self.predictor.predict(batch), dtype=float)[0])
            hit = (pa, pb, value if np.isfinite(value) and value >= 1.0 else 1.0)
            self._cache[key] = hit
        return hit[2]
