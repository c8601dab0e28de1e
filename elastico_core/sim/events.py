"""Typed simulation events and the heap that orders them (SimPy/Vidur style, per-instance sequence)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum


class Order(IntEnum):
    """Tie-break between events at the same instant: state changes first, then the policy epoch.

    An arrival and an epoch at t=10 s must see the arrival first (a 5-second controller that wakes
    at t=10 s sees every job submitted up to and including t=10 s).
    """

    FINISH = 0
    TRANSITION = 1
    ARRIVAL = 2
    EPOCH = 3


@dataclass(frozen=True, slots=True)
class JobArrival:
    time: float
    job_id: str


@dataclass(frozen=True, slots=True)
class JobFinish:
    """Scheduled when a job's speed is set; stale once the job's ``version`` moved on."""

    time: float
    job_id: str
    version: int


@dataclass(frozen=True, slots=True)
class TransitionDone:
    """A configuration switch, migration, resume or start-up completes (``oom``: it crashes instead)."""

    time: float
    job_id: str
    version: int
    oom: bool = False


@dataclass(frozen=True, slots=True)
class Epoch:
    """A planning epoch at which the policy is asked for a decision."""

    time: float


Event = JobArrival | JobFinish | TransitionDone | Epoch

ORDER: dict[type, Order] = {
    JobFinish: Order.FINISH,
    TransitionDone: Order.TRANSITION,
    JobArrival: Order.ARRIVAL,
    Epoch: Order.EPOCH,
}


class Engine:
    """A heap of events ordered by (time, kind, insertion); the sequence counter is per instance.

    A class-level counter (Vidur) would make two simulations in one process interleave their
    tie-breaks; a per-instance one (SimPy) keeps every run reproducible on its own.
    """

    def __init__(self, *, start: float = 0.0) -> None:
        self.now = start
        self._heap: list[tuple[float, int, int, Event]] = []
        self._seq = itertools.count()
        self.processed = 0

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, ev: Event) -> None:
        if ev.time < self.now - 1e-9:
            raise ValueError(f"cannot schedule {ev!r} before now ({self.now})")
        heapq.heappush(self._heap, (ev.time, ORDER[type(ev)], next(self._seq), ev))

    def peek_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop(self) -> Event:
        time, _, _, ev = heapq.heappop(self._heap)
        self.now = max(self.now, time)
        return ev

    def run(self, handle: Callable[[Event], Iterable[Event]], until: float | None = None) -> None:
        """Pop events in order and schedule what ``handle`` returns, until the heap is empty or ``until``."""
        while self._heap:
            if until is not None and self._heap[0][0] > until:
                self.now = until
                return
            ev = self.pop()
            self.processed += 1
            for follow in handle(ev):
                self.schedule(follow)
