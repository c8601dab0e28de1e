"""One Policy interface for ElastiCo and every baseline (STYLE G6), and the registry of policies (G7).

The simulator calls ``policy.decide(snapshot)`` and applies the returned ``Decision``; it never asks
which policy it runs. A Decision is the *complete* desired state: every job it lists runs with those
knobs on those GPUs; every running job it omits is preempted. The simulator diffs it against the
current state and charges the costs of change itself, so all policies pay the same prices.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, Protocol, TypeVar, runtime_checkable

from elastico_core.iac.predictor import SlowdownPredictor
from elastico_core.model.cluster import Cluster
from elastico_core.model.errors import SpecError
from elastico_core.model.job import JobSpec
from elastico_core.model.knobs import Knobs
from elastico_core.model.state import Assignment
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.profiles import ProfileBook


class PolicyKind(StrEnum):
    """Registered policies. The ablations are presets of ElastiCo's parameters (``ElasticoConfig``)."""

    VOLCANO = "volcano"
    LUCID = "lucid"
    GREEDY = "greedy"  # greedy first-fit with reshaping: the "w/o ESP" ablation
    ELASTICO = "elastico"
    ELASTICO_BOUNDED = "elastico-bounded"  # ElastiCo under the BOUNDED rules: pairs planned by IAC's 90 % upper bound
    ELASTICO_NO_RST = "elastico-no-rst"
    ELASTICO_NO_IAC = "elastico-no-iac"
    ELASTICO_NO_PDS = "elastico-no-pds"


class JobStatus(StrEnum):
    PENDING = "pending"  # waiting (never started, preempted, or crashed out of memory)
    RUNNING = "running"
    CHANGING = "changing"  # placed, in a switch / migration / resume; no progress meanwhile


@dataclass(frozen=True, slots=True)
class JobView:
    """What a policy may know about one job that has arrived and not finished.

    Attained service is ``work_at(t)``: ``work_done`` as of ``progress_at_s`` plus ``speed`` since (a
    view only changes when the job's state does, which keeps snapshots cheap on large clusters).
    ``mem_mib`` and ``sm`` are the *profile* figures of the current configuration (0 while pending).
    """

    spec: JobSpec
    status: JobStatus
    current: Assignment | None  # current configuration and GPUs (None while pending)
    default_knobs: Knobs  # the configuration the job asked for (a static scheduler's request)
    dp: int  # GPUs of the default configuration
    work_done: float  # attained service at ``progress_at_s``, workload unit x seconds
    progress_at_s: float
    speed: float  # current progress rate (0 unless running)
    mem_mib: float
    sm: float
    first_start_s: float | None
    queued_since_s: float  # when it last became pending
    estimated_duration_s: float  # a runtime estimate of the default configuration (noisy, seeded)
    oom_knobs: tuple[Knobs, ...] = ()  # configurations that crashed out of memory beside a partner
    restarts: int = 0

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def placed(self) -> bool:
        return self.status is not JobStatus.PENDING

    @property
    def knobs(self) -> Knobs | None:
        return self.current.knobs if self.current is not None else None

    @property
    def gpus(self) -> tuple[str, ...]:
        return self.current.gpus if self.current is not None else ()

    def work_at(self, t: float) -> float:
        return min(self.spec.work, self.work_done + self.speed * max(0.0, t - self.progress_at_s))

    def remaining_at(self, t: float) -> float:
        return max(0.0, self.spec.work - self.work_at(t))

    def assignment(self) -> Assignment | None:
        return self.current


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything any policy may read at one epoch (G6): the cluster, the jobs, profiles, its state.

    ``jobs`` are in arrival order (submit time, then id). ``gpu_jobs[i]`` lists the jobs holding
    ``cluster.gpus[i]``. ``state`` is what the policy returned in its last ``Decision.state`` (None at
    the first epoch): prices, reservations, anything it carries.
    """

    time_s: float
    epoch: int
    cluster: Cluster
    jobs: tuple[JobView, ...]
    gpu_jobs: tuple[tuple[str, ...], ...]
    profiles: ProfileBook
    state: object = None

    def pending(self) -> Iterator[JobView]:
        return (j for j in self.jobs if j.status is JobStatus.PENDING)

    def placed(self) -> Iterator[JobView]:
        return (j for j in self.jobs if j.status is not JobStatus.PENDING)

    def running(self) -> dict[str, Assignment]:
        """The placed jobs' assignments by job id (what a planner's input calls running).

        One pass over the jobs: a planning policy asks for it every epoch."""
        return {j.spec.id: j.current for j in self.jobs if j.status is not JobStatus.PENDING and j.current is not None}


@dataclass(frozen=True, slots=True)
class Decision:
    """The desired placement of every job that should run, plus the policy's carried state."""

    assignments: tuple[Assignment, ...]
    state: object = None
    notes: tuple[str, ...] = field(default=())


@runtime_checkable
class Policy(Protocol):
    """A scheduling policy. ``decide`` is called at planning epochs (see ``simulator``).

    It must read only its argument (and caches that do not change decisions), never over-commit a
    GPU's memory by the profiles it sees, and list every job it wants running.

    ``event_driven`` declares that the decision is a function of the event-driven state alone (jobs,
    their states and placements, the carried state) and that asking twice without a change gives the
    same decision; the simulator then skips the periodic re-plans, which cannot change anything.
    """

    kind: PolicyKind
    event_driven: bool

    def decide(self, snapshot: ClusterSnapshot) -> Decision: ...


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What a policy factory receives: the profile store and the interference predictor it may use."""

    store: ProfileStore
    predictor: SlowdownPredictor
    seed: int = 0


PolicyFactory = Callable[[PolicyContext], Policy]
K = TypeVar("K")
V = TypeVar("V")


class Registry(Generic[K, V]):
    """An immutable-by-convention mapping of keys to factories; ``register`` refuses duplicates."""

    def __init__(self) -> None:
        self._items: dict[K, V] = {}

    def register(self, key: K, value: V) -> None:
        if key in self._items:
            raise ValueError(f"{key!r} is already registered")
        self._items[key] = value

    def get(self, key: K) -> V:
        try:
            return self._items[key]
        except KeyError:
            raise SpecError(f"no policy {key!r} registered (known: {', '.join(map(str, self._items))})") from None

    def keys(self) -> tuple[K, ...]:
        return tuple(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)


def parse_policies(text: str) -> tuple[PolicyKind, ...]:
    """``"volcano,lucid,elastico"`` -> kinds (the CLI's one place where these strings become enums)."""
    out: list[PolicyKind] = []
    for raw in text.split(","):
        name = raw.strip().lower()
        if not name:
            continue
        try:
            kind = PolicyKind(name)
        except ValueError:
            raise SpecError(f"unknown policy {name!r} (known: {', '.join(k.value for k in PolicyKind)})", field="policies") from None
        if kind not in out:
            out.append(kind)
    if not out:
        raise SpecError("no policies given", field="policies")
    return tuple(out)
