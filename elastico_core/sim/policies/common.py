"""A small per-decision GPU board shared by the heuristic policies (Volcano-, Lucid-like, greedy)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from elastico_core.model.knobs import Knobs
from elastico_core.model.profile import Profile
from elastico_core.model.state import Assignment
from elastico_core.sim.policy import ClusterSnapshot, JobView

EPS = 1e-6


@dataclass(frozen=True, slots=True)
class Slot:
    """One job's share of one GPU as the policy sees it (profile figures, not the ground truth)."""

    job_id: str
    mem_mib: float
    sm: float


@dataclass
class Board:
    """GPUs in cluster order with what each holds; ``node_of[g]`` and ``gpus_of_node[n]`` index them."""

    gpu_ids: tuple[str, ...]
    node_of: tuple[int, ...]
    gpus_of_node: tuple[tuple[int, ...], ...]
    usable_mib: float
    max_per_gpu: int
    slots: list[list[Slot]] = field(default_factory=list)
    placed: dict[str, Assignment] = field(default_factory=dict)

    @classmethod
    def of(cls, snapshot: ClusterSnapshot) -> Board:
        cluster = snapshot.cluster
        gpu_ids = tuple(g.id for g in cluster.gpus)
        node_ix = {n.name: i for i, n in enumerate(cluster.nodes)}
        node_of = tuple(node_ix[g.node] for g in cluster.gpus)
        by_node: list[list[int]] = [[] for _ in cluster.nodes]
        for g, n in enumerate(node_of):
            by_node[n].append(g)
        board = cls(
            gpu_ids,
            node_of,
            tuple(tuple(x) for x in by_node),
            cluster.usable_mem_mib(snapshot.profiles.gpu),
            cluster.max_jobs_per_gpu,
            [[] for _ in gpu_ids],
        )
        index = {gid: i for i, gid in enumerate(gpu_ids)}
        for j in snapshot.placed():
            assert j.knobs is not None
            prof = snapshot.profiles.profile(j.spec.workload, j.knobs)
            mem, sm = (prof.resources.gpu_mem_mib, prof.resources.sm) if prof else (board.usable_mib, 1.0)
            board.add(j.id, j.knobs, tuple(index[g] for g in j.gpus), mem, sm)
        return board

    def free_mem(self, g: int) -> float:
        return self.usable_mib - sum(s.mem_mib for s in self.slots[g])

    def free_sm(self, g: int, capacity: float = 1.0) -> float:
        return capacity - sum(s.sm for s in self.slots[g])

    def empty(self, g: int) -> bool:
        return not self.slots[g]

    def add(self, job_id: str, knobs: Knobs, gpus: tuple[int, ...], mem: float, sm: float) -> None:
        for g in gpus:
            self.slots[g].append(Slot(job_id, mem, sm))
        self.placed[job_id] = Assignment(job_id, knobs, tuple(self.gpu_ids[g] for g in gpus))

    def fits(self, g: int, mem: float, sm: float, sm_capacity: float | None) -> bool:
        if len(self.slots[g]) >= self.max_per_gpu or self.free_mem(g) < mem - EPS:
            return False
        return sm_capacity is None or self.free_sm(g, sm_capacity) >= sm - EPS

    def assignments(self) -> tuple[Assignment, ...]:
        return tuple(self.placed[k] for k in sorted(self.placed))


def whole_gpus(board: Board, count: int) -> tuple[int, ...] | None:
    """``count`` empty GPUs, consolidated: the fullest node that still has room (best fit), else
    whole nodes with the most empty GPUs first (Volcano binpack / Lucid consolidate placement)."""
    free = [[g for g in gs if board.empty(g)] for gs in board.gpus_of_node]
    fitting = [n for n, f in enumerate(free) if len(f) >= count]
    if fitting:
        n = min(fitting, key=lambda n: (len(free[n]), n))
        return tuple(free[n][:count])
    if sum(len(f) for f in free) < count:
        return None
    out: list[int] = []
    for n in sorted(range(len(free)), key=lambda n: (-len(free[n]), n)):
        out.extend(free[n][: count - len(out)])
        if len(out) == count:
            return tuple(out)
    return None


def first_fit(
    board: Board, count: int, ok: Callable[[int], bool], prefer_node: bool = True
) -> tuple[int, ...] | None:
    """The first ``count`` GPUs (cluster order) passing ``ok``, within one node when one has enough."""
    if prefer_node:
        for gs in board.gpus_of_node:
            hits = [g for g in gs if ok(g)]
            if len(hits) >= count:
                return tuple(hits[:count])
    hits = [g for g in range(len(board.gpu_ids)) if ok(g)]
    return tuple(hits[:count]) if len(hits) >= count else None


def fifo(jobs: Iterable[JobView]) -> list[JobView]:
    """FIFO within priority: higher priority first, then submission time, then id."""
    return sorted(jobs, key=lambda j: (-j.spec.priority, j.spec.submit_time_s, j.id))


def keep_running(snapshot: ClusterSnapshot) -> Sequence[JobView]:
    return [j for j in snapshot.placed()]


def profile_of(snapshot: ClusterSnapshot, job: JobView, knobs: Knobs) -> Profile | None:
    return snapshot.profiles.profile(job.spec.workload, knobs)
