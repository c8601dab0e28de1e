"""Why a queued job waits, as data: the resource that binds, what the job needs of it and the most that is free.

The planner names a queued job's shortfall from the board it ends the epoch with; the reason a user reads
is rendered from that (``render``, with the model's one wording, ``describe_shortfall``), so nothing
downstream parses text. Units are those of ``Shortfall``:
memory in MiB, SM as a share of one GPU, CPU in cores, slots as a count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto

import numpy as np

from elastico_core.model.explain import describe_capacity, describe_shortfall
from elastico_core.model.plan import Binding, QueueCode, Shortfall
from elastico_core.pds.board import EPS, Board, Demand


class Refusal(Enum):
    """Why a packing stage left a job out (typed, so the queue code is never read off a sentence)."""

    NO_ROOM = auto()  # no GPU has room for any of its configurations
    INTERFERENCE = auto()  # every GPU it fits on holds a partner it would slow (or be slowed by) beyond tau
    UNSAFE = auto()  # split after the rounds: no interference-safe placement this epoch


# the per-GPU checks, in the order ties are broken: GPU memory last, so a tie never blames memory
# that some GPU the job could use has free
_CHECKS = (Binding.HOST_MEMORY, Binding.CPU, Binding.SM, Binding.GPU_SLOT, Binding.GPU_MEMORY)
_ON_NODE = frozenset({Binding.HOST_MEMORY, Binding.CPU})


@dataclass(frozen=True, slots=True, eq=False)
class Room:
    """What is free on every GPU of a board once the epoch is decided (node figures repeated per GPU)."""

    gpu_ids: tuple[str, ...]
    node_names: tuple[str, ...]
    gpu_node: np.ndarray  # intp
    model: np.ndarray  # intp
    free: dict[Binding, np.ndarray]  # per check, per GPU
    # ``capacity_shortfall`` per demand: the room is fixed, and on a full cluster hundreds of queued jobs
    # share a few dozen nearest configurations
    known: dict[Demand, Shortfall | None] = field(default_factory=dict)

    @classmethod
    def of(cls, board: Board) -> Room:
        node = np.asarray(board.gpu_node, dtype=np.intp)
        slots = board.max_per_gpu - np.fromiter(map(len, board.occ), dtype=float, count=len(board.occ))
        return cls(
            gpu_ids=board.gpu_ids,
            node_names=tuple(n.name for n in board.cluster.nodes),
            gpu_node=node,
            model=np.asarray(board.gpu_model, dtype=np.intp),
            free={
                Binding.GPU_MEMORY: np.asarray(board.free_mem, dtype=float),
                Binding.SM: np.asarray(board.free_sm, dtype=float),
                Binding.GPU_SLOT: slots,
                Binding.CPU: np.asarray(board.node_free_cpu, dtype=float)[node],
                Binding.HOST_MEMORY: np.asarray(board.node_free_host, dtype=float)[node],
            },
        )

    def place_name(self, resource: Binding, g: int) -> str:
        return self.node_names[int(self.gpu_node[g])] if resource in _ON_NODE else self.gpu_ids[g]


def _need(d: Demand, resource: Binding) -> float:
    return {
        Binding.GPU_MEMORY: d.mem,
        Binding.SM: d.sm,
        Binding.GPU_SLOT: 1.0,
        Binding.CPU: d.cpu,
        Binding.HOST_MEMORY: d.host,
    }[resource]


def capacity_shortfall(room: Room, d: Demand) -> Shortfall | None:
    """The resource that keeps option ``d`` off every GPU of its model, or None when ``d.dp`` GPUs hold it.

    The binding resource is the one whose lack turns away the most GPUs that pass every other check
    (more of it would open them); ``free`` is the most of it free on such a GPU (on any GPU of the model
    short of it when none passes the others), ``where`` that GPU, or its node for CPU and host memory.
    So ``free < need`` always: no job is said to lack what a GPU it could use has free.
    """
    known = room.known
    if d in known:
        return known[d]
    out = known[d] = _capacity_shortfall(room, d)
    return out


def _capacity_shortfall(room: Room, d: Demand) -> Shortfall | None:
    sel = np.flatnonzero(room.model == d.model)
    if not len(sel):
        return Shortfall(Binding.GPU_SLOT, float(d.dp), 0.0, None)
    ok = {r: room.free[r][sel] >= _need(d, r) - EPS for r in _CHECKS}
    every = np.logical_and.reduce([ok[r] for r in _CHECKS])
    n_ok = int(every.sum())
    if n_ok >= d.dp:
        return None
    others = {r: np.logical_and.reduce([ok[o] for o in _CHECKS if o is not r]) for r in _CHECKS}
    relax = {r: int(others[r].sum()) for r in _CHECKS}
    best = max(relax.values())
    if best >= d.dp or d.dp == 1:
        if best > 0:
            resource = max(_CHECKS, key=lambda r: (relax[r], -int(ok[r].sum())))
            candidates = sel[others[resource] & ~ok[resource]]
        else:  # every GPU fails two checks or more: the scarcest resource binds
            resource = min(_CHECKS, key=lambda r: int(ok[r].sum()))
            candidates = sel[~ok[resource]]
        if resource is Binding.GPU_SLOT and d.dp > 1:  # a gang: counted in GPUs, not one GPU's slots
            return Shortfall(Binding.GPU_SLOT, float(d.dp), float(n_ok), None)
        free = room.free[resource][candidates]
        g = int(candidates[int(np.argmax(free))])
        return Shortfall(resource, _need(d, resource), max(0.0, float(free.max())), room.place_name(resource, g))
    return Shortfall(Binding.GPU_SLOT, float(d.dp), float(n_ok), None)  # a gang: too few GPUs take a member


def smallest_shortfall(room: Room, demands: list[Demand]) -> Shortfall | None:
    """Over a job's candidate configurations: None if one fits, else the shortfall of the nearest one
    (the least relative deficit, the first given on a tie)."""
    best: tuple[float, Shortfall] | None = None
    for d in demands:
        s = capacity_shortfall(room, d)
        if s is None:
            return None
        gap = (s.need - s.free) / s.need if s.need > 0 else 0.0
        if best is None or gap < best[0] - 1e-12:
            best = (gap, s)
    assert best is not None
    return best[1]


_LEAD = {
    QueueCode.NO_FEASIBLE_CONFIG: "never fits this cluster: ",
    QueueCode.FLOOR_UNREACHABLE: "",
    QueueCode.NO_CAPACITY: "no room beside the jobs admitted: ",
    QueueCode.PRICED_OUT: "waits for room: ",
    QueueCode.INTERFERENCE: "interference: ",
    QueueCode.PREEMPTED: "preempted: ",
    QueueCode.OUTBID: "outbid: checkpointed for shorter jobs that waited; ",
    QueueCode.SET_ASIDE: "set aside: ",
}


def render(code: QueueCode, s: Shortfall, unit: str = "") -> str:
    """The reason a user reads, rendered from the code and the shortfall — nothing it says is not in them
    (a priced-out job is said to wait for room, and for whom, not to be outbid by jobs of higher value)."""
    if s.resource is Binding.PRICE:
        return (_LEAD[code] if code is QueueCode.OUTBID else "priced out: ") + describe_shortfall(s, unit)
    if s.resource is Binding.FLOOR:  # the planner's own wording since the first release: scripts grep it
        u = f" {unit}" if unit else ""
        return _LEAD[code] + f"floor {s.need:g}{u} exceeds the best achievable {s.free:.4g}{u} on this cluster"
    if code is QueueCode.NO_FEASIBLE_CONFIG:
        return _LEAD[code] + describe_capacity(s, unit)
    return _LEAD[code] + describe_shortfall(s, unit)
