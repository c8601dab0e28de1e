"""One batched state read per interval for every trigger of a triggerer: the poll load does not grow with the jobs.

A triggerer holds thousands of deferred tasks; if each trigger read its own job every two seconds, 1,000 jobs
would cost 500 state queries per second and 1,000 threads' worth of ``asyncio.to_thread`` calls. Instead
the triggers of one event loop that watch the same state share a ``JobReader``: it reads every watched job
with one ``JobService.get_many`` per interval (one ``SELECT ... WHERE id IN (...)`` per 500 jobs) in a
thread, and each trigger takes its job's latest view from it. The cost is ``ceil(jobs / 500) / interval``
queries per second per triggerer — for 1,000 jobs at the default 2 s, one query per second.

The readers are kept per (event loop, state URL) in this module: that is the one piece of process-wide
state in the plugin, and it lives only as long as some trigger watches a job (the last one to leave
closes the reader's service).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, ClassVar, TypeVar

if TYPE_CHECKING:
    from elastico_core.state import JobService, JobView

log = logging.getLogger(__name__)
T = TypeVar("T")


class JobReader:
    """The latest view of every job the triggers of one event loop watch, refreshed every ``interval_s``."""

    _shared: ClassVar[dict[tuple[int, str], JobReader]] = {}

    def __init__(self, key: tuple[int, str], open_service: Callable[[], JobService], interval_s: float) -> None:
        self._key = key
        self._open = open_service
        self.interval_s = max(0.05, float(interval_s))
        self._watched: Counter[str] = Counter()
        self._views: dict[str, JobView | None] = {}
        self._batch = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._svc: JobService | None = None
        self.reads = 0  # batches read (tests and the load test's poll-load figure)
        self.errors = 0

    @classmethod
    def shared(cls, state_url: str, open_service: Callable[[], JobService], interval_s: float) -> JobReader:
        """This event loop's reader of ``state_url`` (made on first use; its interval is the shortest asked)."""
        key = (id(asyncio.get_running_loop()), state_url)
        reader = cls._shared.get(key)
        if reader is None:
            reader = cls._shared[key] = cls(key, open_service, interval_s)
        reader.interval_s = min(reader.interval_s, max(0.05, float(interval_s)))
        return reader

    @contextlib.asynccontextmanager
    async def watching(self, job_id: str) -> AsyncIterator[JobReader]:
        """Read ``job_id`` in every batch while the block runs."""
        self._watched[job_id] += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"elastico-state-reader-{id(self)}")
        try:
            yield self
        finally:
            self._watched[job_id] -= 1
            if self._watched[job_id] <= 0:
                del self._watched[job_id]
                self._views.pop(job_id, None)

    async def get(self, job_id: str) -> JobView | None:
        """The job as the latest batch saw it (waits for the first batch that read it); None: unknown or unreadable."""
        while job_id not in self._views:
            if self._task is None or self._task.done():
                return None
            self._batch.clear()
            await self._batch.wait()
        return self._views[job_id]

    async def call(self, fn: Callable[[JobService], T]) -> T:
        """``fn(service)`` in a thread on this reader's service (a throughput report from a trigger)."""
        if self._svc is None:
            self._svc = await asyncio.to_thread(self._open)
        svc = self._svc
        return await asyncio.to_thread(fn, svc)

    async def _run(self) -> None:
        try:
            while self._watched:
                ids = list(self._watched)
                try:
                    if self._svc is None:
                        self._svc = await asyncio.to_thread(self._open)
                    views = await asyncio.to_thread(self._svc.get_many, ids)
                    self.reads += 1
                    self._views.update({job_id: views.get(job_id) for job_id in ids})
                except Exception as exc:  # unreachable for a moment: the triggers keep what they saw
                    self.errors += 1
                    log.warning("cannot read %d jobs from the state (%s); retrying", len(ids), type(exc).__name__)
                    for job_id in ids:
                        self._views.setdefault(job_id, None)
                self._batch.set()
                await asyncio.sleep(self.interval_s)
        finally:
            self._batch.set()
            if self._svc is not None:
                svc, self._svc = self._svc, None
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(svc.close)
            if JobReader._shared.get(self._key) is self:
                del JobReader._shared[self._key]
