"""One launch of a job's plan, behind a small protocol that the supervise loop drives for a process or a pod alike.

A launch has two sides, because the task defers while its workload runs:

* the **task's side** (in an Airflow worker, briefly): ``start`` a launch of a plan token — or find the one an
  earlier try started — and read its ``outcome`` once it has ended (progress events, exit code, OOM; logs
  streamed into the task log; the pod cleaned up);
* the **watch side** (``Launch``, in the triggerer, for as long as the workload runs): ``poll`` it, ``request``
  a checkpoint or a stop, ``terminate`` it, read its progress ``events`` so far.

``LaunchRef`` is what passes between them: a small JSON value in the trigger's kwargs and the resume event,
enough to find the launch again from any worker or triggerer — nothing is kept in the operator between
deferrals, so a resumed task may run on another worker than the one that started the launch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from elastico_airflow.settings import Launcher
from elastico_airflow.supervise import Summary


@dataclass(frozen=True, slots=True)
class LaunchRef:
    """Where one launch of plan ``token`` runs: a local process (run folder, pid) or a pod (name, namespace).

    ``where`` holds only plain JSON values (the trigger row stores it); never a URL or a credential.
    """

    launcher: Launcher
    job_id: str
    token: str
    where: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"launcher": self.launcher.value, "job_id": self.job_id, "token": self.token, "where": dict(self.where)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> LaunchRef:
        return cls(Launcher(str(raw["launcher"])), str(raw["job_id"]), str(raw["token"]), dict(raw.get("where") or {}))


@dataclass(frozen=True, slots=True)
class Probe:
    """One look at a launch: still running, or ended (with what the watch side can tell of how)."""

    ended: bool
    exit_code: int | None = None  # None: unknown here (a pod's is in its XCom; the task reads it)
    oom_killed: bool = False  # the kernel killed the container for memory
    detail: str = ""  # e.g. the pod's phase, "the pod is gone"

    @classmethod
    def running(cls, detail: str = "") -> Probe:
        return cls(False, detail=detail)


@dataclass(frozen=True, slots=True)
class Ended:
    """How one launch ended, as the task reads it on resume (``outcome``)."""

    token: str
    summary: Summary  # its progress events, summarised
    exit_code: int | None
    oom_killed: bool = False
    reason: str = ""  # why it failed when nothing else says (the pod could not be read, ...)


@runtime_checkable
class Launch(Protocol):
    """The watch side of one launch (the supervise loop calls these; each returns quickly and never blocks).

    ``request`` and ``terminate`` may be repeated: a triggerer that restarts runs the loop again from the
    start, and the loop asks again.
    """

    token: str

    async def poll(self) -> Probe:
        """Whether the workload still runs; never raises for a launch that is gone (that is ``ended``)."""
        ...

    async def request(self, action: str) -> bool:
        """Ask the workload to ``checkpoint`` (switch) or ``stop`` at its next step; False: not delivered."""
        ...

    async def terminate(self, *, force: bool) -> None:
        """SIGTERM (the workload checkpoints) or, with ``force``, SIGKILL / delete without grace."""
        ...

    async def events(self) -> list[dict[str, Any]]:
        """Progress events of this launch so far ([] where only the end tells, as for a pod)."""
        ...


class Clock(Protocol):
    """Time for the supervise loop: the event loop's in the triggerer, a fake one in tests (no sleeps)."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and ``asyncio.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        import asyncio

        await asyncio.sleep(seconds)
