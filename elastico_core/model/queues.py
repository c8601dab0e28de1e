"""Queues that share a cluster between teams (Kueue's ClusterQueues): quotas, limits, cohorts, weights.

A queue has a *nominal quota* per GPU model (Kueue's flavor) of two resources, GPUs and GPU memory; within
it its jobs are guaranteed. Quota a queue does not use is *lent* to the other queues of its cohort, at most
its ``lending_limit``; a queue may *borrow* beyond its nominal quota at most its ``borrowing_limit``.
Capacity that several queues want beyond their nominal quotas is shared by ``weight`` (dominant share over
GPUs and GPU memory). Lent quota comes back within ``reclaim_epochs`` planning epochs of its owner having
work that fits in it (``pds/quotas.py``). Capacity no queue names (the cluster minus the sum of nominal
quotas) may be borrowed by every queue of a cohort.

**How a job is charged** (``charge``): on each of its GPUs, the largest of its shares of that GPU's SMs,
its memory (less M_sys) and its job slots (one of ``max_jobs_per_gpu``). These are what MPS partitions
between co-located jobs (the SM percentage and the pinned memory limit) and what keeps another job off the
GPU, so a job is charged for what it holds, as KAI and HAMi charge a fractional GPU by the fraction asked:
two jobs sharing a GPU pay about half a GPU each, and a job alone at a large configuration close to a whole
one. The charge depends only on the job's configuration, never on its partners, so a queue's usage cannot
change because a partner left, and the planner can price it (a good per queue, as GPUs and memory are
priced) and check it at every placement. GPU memory is charged as held: memory per GPU x GPUs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from elastico_core.model.errors import SpecError

QUEUE_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")  # a DNS-1123 label, as Kueue names queues
DEFAULT_QUEUE = "default"  # a job that names no queue (Kueue's LocalQueue defaulting)
RECLAIM_EPOCHS_DEFAULT = 3
GIB = 1024.0


def charge(dp: float, sm: float, mem_mib: float, usable_mib: float, sm_capacity: float, max_jobs: int) -> float:
    """GPUs' worth a configuration is charged against its queue's quota (module doc).

    ``sm`` and ``mem_mib`` are per GPU; ``sm_capacity`` is what one GPU offers (an infinite capacity,
    time-sliced packing, makes SM share free); ``max_jobs`` the jobs one GPU may hold.
    """
    sm_share = sm / sm_capacity if math.isfinite(sm_capacity) and sm_capacity > 0 else 0.0
    return dp * max(sm_share, mem_mib / usable_mib, 1.0 / max_jobs)


@dataclass(frozen=True, slots=True)
class Amount:
    """GPUs and GPU memory (GiB) of one GPU model; ``inf`` means no limit."""

    gpus: float
    memory_gib: float

    def __post_init__(self) -> None:
        for name in ("gpus", "memory_gib"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
                raise SpecError(f"must be a number >= 0, got {value!r}", field=name)

    def show(self) -> str:
        mem = "no limit" if math.isinf(self.memory_gib) else f"{self.memory_gib:g} GiB"
        gpus = "no limit" if math.isinf(self.gpus) else f"{self.gpus:g} GPUs"
        return f"{gpus}, {mem}"


UNLIMITED = Amount(math.inf, math.inf)


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """One queue (Kueue's ClusterQueue): per GPU model its nominal quota and its limits.

    ``nominal``, ``borrowing_limit`` and ``lending_limit`` map GPU model names to ``Amount``s. A model absent
    from ``nominal`` has a nominal quota of 0; absent from ``borrowing_limit``, no limit (Kueue's default);
    absent from ``lending_limit``, all of its nominal quota may be lent. A queue without a ``cohort``
    neither lends nor borrows.
    """

    name: str
    nominal: tuple[tuple[str, Amount], ...]
    cohort: str | None = None
    weight: float = 1.0
    borrowing_limit: tuple[tuple[str, Amount], ...] = ()
    lending_limit: tuple[tuple[str, Amount], ...] = ()

    def __post_init__(self) -> None:
        where = f"queue {self.name!r}"
        if not isinstance(self.name, str) or not QUEUE_NAME.match(self.name):
            raise SpecError("queue names are DNS labels: lower case letters, digits and '-', at most 63", where=where, field="name")
        if self.cohort is not None and not QUEUE_NAME.match(self.cohort):
            raise SpecError("cohort names are DNS labels: lower case letters, digits and '-', at most 63", where=where, field="cohort")
        w = self.weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w <= 0:
            raise SpecError(f"must be a finite number > 0, got {w!r}", where=where, field="weight")
        for name, items in (("nominal_quota", self.nominal), ("borrowing_limit", self.borrowing_limit),
                            ("lending_limit", self.lending_limit)):
            models = [m for m, _ in items]
            if len(set(models)) != len(models):
                raise SpecError("a GPU model is named twice", where=where, field=name)
        if self.cohort is None:  # as Kueue refuses them: without a cohort a queue neither borrows nor lends
            for name, items in (("borrowing_limit", self.borrowing_limit), ("lending_limit", self.lending_limit)):
                if items:
                    raise SpecError("needs a cohort (a queue without one neither borrows nor lends)", where=where, field=name)
        for model, amount in self.nominal:
            if math.isinf(amount.gpus) or math.isinf(amount.memory_gib):
                raise SpecError("a nominal quota is finite", where=where, field=f"nominal_quota.{model}")
        for model, lend in self.lending_limit:
            mine = self.nominal_of(model)
            if lend.gpus > mine.gpus + 1e-9 or lend.memory_gib > mine.memory_gib + 1e-9:
                raise SpecError(f"lends more than its nominal quota ({mine.show()})", where=where, field=f"lending_limit.{model}")

    def nominal_of(self, model: str) -> Amount:
        return dict(self.nominal).get(model, Amount(0.0, 0.0))

    def borrowing_of(self, model: str) -> Amount:
        """How much it may use beyond its nominal quota (0 without a cohort)."""
        if self.cohort is None:
            return Amount(0.0, 0.0)
        return dict(self.borrowing_limit).get(model, UNLIMITED)

    def lending_of(self, model: str) -> Amount:
        """How much of its nominal quota others may use while it does not (0 without a cohort)."""
        if self.cohort is None:
            return Amount(0.0, 0.0)
        return dict(self.lending_limit).get(model, self.nominal_of(model))


@dataclass(frozen=True, slots=True)
class QueueSet:
    """The cluster's queues and how fast lent quota comes back (empty: no queues, no quotas)."""

    queues: tuple[QueueSpec, ...] = ()
    reclaim_epochs: int = RECLAIM_EPOCHS_DEFAULT
    _by_name: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [q.name for q in self.queues]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise SpecError(f"duplicate queue names {dup}", field="queues")
        r = self.reclaim_epochs
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= 1000:
            raise SpecError(f"must be an integer in 1..1000, got {r!r}", field="reclaim_epochs")
        object.__setattr__(self, "_by_name", {n: i for i, n in enumerate(names)})

    def __bool__(self) -> bool:
        return bool(self.queues)

    def __len__(self) -> int:
        return len(self.queues)

    @property
    def lookup(self) -> Mapping[str, int]:
        """Queue name -> its position (read-only use)."""
        return self._by_name

    def index(self, name: str) -> int:
        """The queue's position, or -1 for a name that is not a queue here."""
        return self._by_name.get(name, -1)

    def get(self, name: str) -> QueueSpec | None:
        i = self._by_name.get(name)
        return None if i is None else self.queues[i]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(q.name for q in self.queues)

    def check_against(self, gpus_per_model: Mapping[str, int], device_mib: Mapping[str, float], where: str) -> None:
        """Quotas name GPU models the cluster has, and nominal quotas add up to no more than it has (GPUs, and
        GPU memory against the devices' memory: a planner's memory margin never makes a valid file invalid)."""
        for q in self.queues:
            for field_name, items in (("nominal_quota", q.nominal), ("borrowing_limit", q.borrowing_limit),
                                      ("lending_limit", q.lending_limit)):
                for model, _ in items:
                    if model not in gpus_per_model:
                        raise SpecError(f"GPU model {model!r} is not in the cluster (models: {', '.join(gpus_per_model)})",
                                        where=f"{where}: queue {q.name!r}", field=field_name)
        for model, count in gpus_per_model.items():
            gpus = sum(q.nominal_of(model).gpus for q in self.queues)
            mem = sum(q.nominal_of(model).memory_gib for q in self.queues)
            cap_mem = count * device_mib[model] / GIB
            if gpus > count + 1e-9:
                raise SpecError(f"nominal quotas of {model} add up to {gpus:g} GPUs; the cluster has {count}",
                                where=where, field="queues")
            if mem > cap_mem + 1e-6:
                raise SpecError(f"nominal quotas of {model} add up to {mem:g} GiB of GPU memory; the cluster has "
                                f"{cap_mem:g} GiB", where=where, field="queues")


NO_QUEUES = QueueSet()


def amounts(raw: Mapping[str, Amount] | Iterable[tuple[str, Amount]]) -> tuple[tuple[str, Amount], ...]:
    """A canonical (sorted by model) tuple of per-model amounts."""
    items = raw.items() if isinstance(raw, Mapping) else raw
    return tuple(sorted(items))
