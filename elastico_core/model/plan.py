"""Plans: the planner's output for one epoch, and the actions that move the cluster there."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum

from elastico_core.model.knobs import ChangeKind, Knobs
from elastico_core.model.resources import ResourceVector


@dataclass(frozen=True, slots=True)
class Prices:
    """Shadow prices per good (§3.2.3), in score units per one GPU's worth of that good.

    Goods are ``<gpu model>:sm``, ``<gpu model>:mem``, ``<gpu model>:slot``, ``cpu`` and ``host_mem``.
    """

    items: tuple[tuple[str, float], ...] = ()

    @classmethod
    def of(cls, mapping: Mapping[str, float]) -> Prices:
        return cls(tuple(sorted((k, float(v)) for k, v in mapping.items())))

    def as_dict(self) -> dict[str, float]:
        return dict(self.items)

    def get(self, good: str, default: float = 0.0) -> float:
        for key, value in self.items:
            if key == good:
                return value
        return default


class QueueCode(StrEnum):
    NO_FEASIBLE_CONFIG = "no-feasible-config"  # nothing in the knob space fits any GPU of the cluster
    FLOOR_UNREACHABLE = "floor-unreachable"  # no configuration reaches the throughput floor
    NO_CAPACITY = "no-capacity"  # fits in principle, but not beside what already runs
    PRICED_OUT = "priced-out"  # the market gave its resources to jobs of higher value
    INTERFERENCE = "interference"  # every partner it could share with would slow someone below tau
    PREEMPTED = "preempted"  # was running; its GPUs are gone
    SET_ASIDE = "set-aside"  # planning it raised an unexpected error: left out of this epoch, retried the next
    QUOTA = "quota"  # its queue's quota (nominal, borrowing limit, the cohort's unused quota) does not cover it
    RECLAIMED = "reclaimed"  # was running beyond its queue's entitlement; the quota went back to its owner
    OUTBID = "outbid"  # was running; waiting jobs bid more for its GPUs than it is worth by the outbid margin


class Binding(StrEnum):
    """The resource that keeps a queued job out, in the units a user reads (see ``Shortfall``)."""

    GPU_MEMORY = "gpu_memory"  # MiB on one GPU
    SM = "sm"  # share of one GPU's SMs (0..1)
    GPU_SLOT = "gpu_slot"  # GPUs that may take another job (count)
    CPU = "cpu"  # cores on one node
    HOST_MEMORY = "host_memory"  # MiB on one node
    FLOOR = "floor"  # the job's throughput floor, in its workload's unit
    INTERFERENCE = "interference"  # predicted slowdown of the best pairing (x)
    PRICE = "price"  # the job's value against the rent of what it needs (score units)
    QUOTA = "quota"  # GPUs' worth of its queue's quota (need: its charge; free: what its queue may still take)
    QUOTA_MEMORY = "quota_memory"  # GiB of its queue's GPU-memory quota (need, free as for ``QUOTA``)


@dataclass(frozen=True, slots=True)
class Shortfall:
    """What a queued job lacks: ``need`` of ``resource`` at its smallest fitting configuration, ``free`` the
    most of it available where it could go, and ``where`` that place (a GPU or node id; ``None``: nowhere).

    Scripts read these names and units (``elastico plan --json``): keep them.
    ``need``/``free`` for interference: the tolerance and the predicted slowdown of the worse side of the
    pairing; for price: the rent and the job's value (score units).
    """

    resource: Binding
    need: float
    free: float
    where: str | None = None
    # the jobs holding that resource there (the GPU's, or the node's for CPU and host memory), or the
    # partner a pairing would slow: whom the job waits for, named from the same board the plan shows
    holders: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {"resource": self.resource.value, "need": self.need, "free": self.free, "where": self.where,
                "holders": list(self.holders)}


@dataclass(frozen=True, slots=True)
class Queued:
    job_id: str
    code: QueueCode
    reason: str
    shortfall: Shortfall | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """One admitted job: its configuration, its GPUs and what the planner expects of it."""

    job_id: str
    knobs: Knobs
    gpus: tuple[str, ...]
    resources: ResourceVector  # per GPU
    throughput: float  # isolated, whole job, workload unit
    predicted_slowdown: float  # S_hat under its current partners (1.0 when alone)
    floor: float
    partners: tuple[str, ...] = ()
    source: str = "estimated"

    @property
    def effective_throughput(self) -> float:
        return self.throughput / self.predicted_slowdown


class ActionKind(StrEnum):
    ADMIT = "admit"
    SWITCH = "switch"  # same GPUs, other knobs
    MIGRATE = "migrate"  # other GPUs (possibly other knobs too)
    HOLD = "hold"  # stays queued
    KEEP = "keep"  # nothing changes
    PREEMPT = "preempt"  # was running, now queued (its GPUs disappeared, its quota was reclaimed, or it was outbid)


@dataclass(frozen=True, slots=True)
class Action:
    kind: ActionKind
    job_id: str
    reason: str
    change: ChangeKind | None = None
    from_knobs: Knobs | None = None
    to_knobs: Knobs | None = None
    from_gpus: tuple[str, ...] = ()
    to_gpus: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Violation:
    """A co-located pair whose predicted slowdown exceeds a tolerance threshold (Alg. 1, l. 12)."""

    gpu: str
    job_a: str
    job_b: str
    slowdown_a: float
    slowdown_b: float
    tau_a: float
    tau_b: float


@dataclass(frozen=True, slots=True)
class Penalty:
    job_id: str
    knobs: Knobs
    amount: float  # added to Gamma_j(c) of Eq. 7


@dataclass(frozen=True, slots=True)
class RoundLog:
    """What one ESP<->IAC round did: the prices it reached, the pairs it flagged, the penalties."""

    round: int
    iterations: int
    prices: Prices
    objective: float
    placed: int
    violations: tuple[Violation, ...] = ()
    penalties: tuple[Penalty, ...] = ()
    separated: tuple[tuple[str, str], ...] = ()  # pairs kept apart from the next round on


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue after an epoch (``model/queues.py``): GPUs' worth summed over GPU models, memory in GiB.

    ``fair_share_gpus`` is what the queue may hold now: its nominal quota, less what it lends, plus its
    weighted share of what the others do not use; ``price`` the sum of its quota goods' shadow prices.
    """

    name: str
    cohort: str | None
    weight: float
    nominal_gpus: float
    nominal_gib: float
    used_gpus: float
    used_gib: float
    borrowed_gpus: float
    lent_gpus: float
    pending: int
    demand_gpus: float
    fair_share_gpus: float
    price: float
    borrowing_limit_gpus: float
    lending_limit_gpus: float

    def as_dict(self) -> dict[str, object]:
        """JSON-ready (a limit of none is ``None``); ``from_dict`` reads it back."""
        out: dict[str, object] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = None if isinstance(v, float) and math.isinf(v) else v
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, object]) -> QueueStatus:
        kw: dict[str, object] = {}
        for f in fields(cls):
            v = raw.get(f.name)
            if f.name in ("name",):
                kw[f.name] = str(v)
            elif f.name == "cohort":
                kw[f.name] = None if v is None else str(v)
            elif f.name == "pending":
                kw[f.name] = int(v or 0)  # type: ignore[call-overload]
            else:
                kw[f.name] = math.inf if v is None else float(v)  # type: ignore[arg-type]
        return cls(**kw)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Plan:
    """One epoch's answer. The queued jobs' reasons (``queued``) and ``actions`` (the diff against what
    runs) are derived on first read: a caller that only needs who waits and applies the placements
    itself, as the simulator does every epoch, never pays for explaining a full cluster's queue."""

    placements: tuple[Placement, ...]
    queued_ids: tuple[str, ...]  # the jobs not placed, in the order ``queued`` explains them
    derive_queue: Callable[[], tuple[Queued, ...]] = field(repr=False, compare=False)
    derive_actions: Callable[[], tuple[Action, ...]] = field(repr=False, compare=False)
    prices: Prices
    rounds: tuple[RoundLog, ...]
    objective: float  # sum over placed jobs of w_j * T_j(c) / (T_j(c_max) * S_hat_j)
    iterations: int = 0
    notes: tuple[str, ...] = field(default=())
    # with queues: the pending jobs owed quota their queue lent, and for how many epochs (the next epoch's
    # ``PlanningInput.owed``), and every queue's state (``queues``, derived on first read like ``actions``:
    # the controller records it, the simulator never asks)
    owed: Mapping[str, int] = field(default_factory=dict)
    derive_queues: Callable[[], tuple[QueueStatus, ...]] | None = field(default=None, repr=False, compare=False)
    _actions: list[tuple[Action, ...]] = field(default_factory=list, init=False, repr=False, compare=False)
    _queues: list[tuple[QueueStatus, ...]] = field(default_factory=list, init=False, repr=False, compare=False)

    @property
    def queued(self) -> tuple[Queued, ...]:
        """Every job not placed, with its code, typed shortfall and reason (computed once)."""
        return self.derive_queue()

    @property
    def actions(self) -> tuple[Action, ...]:
        """One action per known job (admit, switch, migrate, keep, hold, preempt), computed once."""
        if not self._actions:
            self._actions.append(self.derive_actions())
        return self._actions[0]

    @property
    def queues(self) -> tuple[QueueStatus, ...]:
        """Every queue's state after this epoch (empty without queues), computed once."""
        if self.derive_queues is None:
            return ()
        if not self._queues:
            self._queues.append(self.derive_queues())
        return self._queues[0]

    def placement(self, job_id: str) -> Placement | None:
        for p in self.placements:
            if p.job_id == job_id:
                return p
        return None


class Once:
    """A value computed on its first call and kept (``Plan.derive_queue``)."""

    __slots__ = ("_make", "_value")

    def __init__(self, make: Callable[[], tuple[Queued, ...]]) -> None:
        self._make: Callable[[], tuple[Queued, ...]] | None = make
        self._value: tuple[Queued, ...] | None = None

    def __call__(self) -> tuple[Queued, ...]:
        if self._value is None:
            assert self._make is not None
            self._value, self._make = self._make(), None
        return self._value
