"""The supervise loop: one copy of "watch the state, ask for a checkpoint, wait out the grace, terminate".

It drives any ``Launch`` (a local process or a pod) against the job as the state shows it, and returns
when the launch has ended; the task then resumes to act on the outcome (``outcomes``). It runs in the
triggerer inside ``ElasticoLaunchTrigger``; tests drive it with a fake launch and a fake clock.

Per poll: the launch ended -> return; else read the job (a cached, batched read: ``statewatch``) and
decide with ``watch_action`` — a switch or migration asks the workload to checkpoint, a cancel asks it
to stop, a preemption (back to pending) to checkpoint; a request not honoured within ``grace_s`` ends in
SIGTERM (the workload checkpoints), then SIGKILL ``kill_after_s`` later. While nothing is asked, the
launch's measured throughput is reported every ``report_s``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Protocol

from elastico_airflow.launch import Clock, Launch, Probe
from elastico_airflow.supervise import Action, Summary, summarize, watch_action
from elastico_core.model.launch import CONTROL_CHECKPOINT, CONTROL_STOP
from elastico_core.state.values import JobStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Seen:
    """The job as one state read showed it."""

    status: JobStatus
    token: str | None
    reason: str = ""


class JobWatch(Protocol):
    """The job's side of the loop: its state, and where running throughput goes."""

    async def read(self) -> Seen | None:
        """The job now; None when the state cannot be read (the loop keeps watching the launch)."""
        ...

    async def report(self, token: str, summary: Summary) -> None:
        """A running measurement: the launch's progress so far (its throughput is the 10-90 % trimmed mean)."""
        ...


@dataclass(frozen=True, slots=True)
class WatchPolicy:
    """Intervals of the loop (seconds)."""

    poll_s: float = 2.0
    grace_s: float = 120.0  # a requested checkpoint may take this long before SIGTERM
    kill_after_s: float = 30.0  # SIGTERM -> SIGKILL
    report_s: float = 15.0  # throughput reports while running (0: none)

    def to_json(self) -> dict[str, float]:
        return {
            "poll_s": self.poll_s,
            "grace_s": self.grace_s,
            "kill_after_s": self.kill_after_s,
            "report_s": self.report_s,
        }


@dataclass(frozen=True, slots=True)
class Watched:
    """What the loop saw: the launch ended after the loop had asked ``requested`` of it."""

    token: str
    requested: Action
    probe: Probe
    terminated: bool = False  # the loop had to SIGTERM / delete it


async def supervise(launch: Launch, job: JobWatch, clock: Clock, policy: WatchPolicy) -> Watched:
    """Watch ``launch`` until it ends; act on the job's state meanwhile (see the module docstring)."""
    requested = Action.CONTINUE
    term_at = kill_at = math.inf
    terminated = False
    next_report = clock.now() + policy.report_s if policy.report_s > 0 else math.inf
    while True:
        probe = await launch.poll()
        if probe.ended:
            return Watched(launch.token, requested, probe, terminated)
        now = clock.now()
        if requested is Action.CONTINUE:
            seen = await job.read()
            action = watch_action(seen.status, launch.token, seen.token) if seen is not None else Action.CONTINUE
            if action is not Action.CONTINUE and seen is not None:
                requested = action
                what = CONTROL_STOP if action is Action.STOP else CONTROL_CHECKPOINT
                delivered = await launch.request(what)
                log.info(
                    "job %s is %s (%s): asked %s to %s%s",
                    launch.token.rsplit(":", 1)[0],
                    seen.status.value,
                    seen.reason,
                    launch.token,
                    what,
                    "" if delivered else " (not delivered: terminating)",
                )
                term_at = now + (policy.grace_s if delivered else 0.0)
        if now >= term_at:
            log.warning("%s did not end within %.0f s of the request: SIGTERM", launch.token, policy.grace_s)
            await launch.terminate(force=False)
            terminated, term_at, kill_at = True, math.inf, now + policy.kill_after_s
        elif now >= kill_at:
            log.warning("%s outlived SIGTERM by %.0f s: SIGKILL", launch.token, policy.kill_after_s)
            await launch.terminate(force=True)
            kill_at = math.inf
        if requested is Action.CONTINUE and now >= next_report:
            next_report = now + policy.report_s
            summary = summarize(await launch.events())
            if summary.throughput:
                await job.report(launch.token, summary)
        await clock.sleep(policy.poll_s)


def policy_of(raw: dict[str, Any] | None) -> WatchPolicy:
    """A ``WatchPolicy`` from its JSON form (a trigger's kwargs)."""
    raw = raw or {}
    default = WatchPolicy()
    return WatchPolicy(
        poll_s=float(raw.get("poll_s", default.poll_s)),
        grace_s=float(raw.get("grace_s", default.grace_s)),
        kill_after_s=float(raw.get("kill_after_s", default.kill_after_s)),
        report_s=float(raw.get("report_s", default.report_s)),
    )
