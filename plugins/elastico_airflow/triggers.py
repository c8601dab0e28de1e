"""The triggers: ``ElasticoAdmissionTrigger`` waits for admission, ``ElasticoLaunchTrigger`` watches a running job.

Between them a job holds no worker slot from registration to its end: the task only runs to act (register,
launch, read an outcome, relaunch), as the provider's deferrable ``KubernetesPodOperator`` does with its
``KubernetesPodTrigger``.

While a job is queued no worker slot is held: the task is deferred and this coroutine takes the job's
state every ``poll_interval`` seconds from the triggerer's shared ``JobReader`` (one batched read for all
the jobs this triggerer watches; ``statewatch``). The state API is blocking (SQLAlchemy), so every call
runs in a thread (``asyncio.to_thread``) and the triggerer's event loop is never blocked.

Only the job id, the connection id and the interval are serialized into the trigger row: the state URL
(which may hold a password) is resolved from the connection inside the triggerer, never stored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from elastico_airflow.launch import Launch, LaunchRef, MonotonicClock
from elastico_airflow.outcomes import fed_throughput, measured_on
from elastico_airflow.settings import ElasticoSettings, Launcher
from elastico_airflow.statewatch import JobReader
from elastico_airflow.supervise import Summary
from elastico_airflow.watch import Seen, WatchPolicy, policy_of, supervise
from elastico_core.state.values import JobStatus

WAITING_STATUSES = frozenset({JobStatus.PENDING})
log = logging.getLogger(__name__)


class ElasticoAdmissionTrigger(BaseTrigger):
    """Fire once the job leaves ``pending`` (admitted, or cancelled/failed by the controller).

    :param job_id: the job the task registered.
    :param elastico_conn_id: the connection locating the planner state.
    :param poll_interval: seconds between state reads.
    :param min_wait_s: never fire sooner than this after the deferral: the scheduler must first see the
        deferring process exit, or (Airflow 3.3, LocalExecutor) it takes the resumed try for a killed one.
    :param timeout_s: fire ``{"status": "timeout"}`` if the job is still pending after this long (0: never);
        the operator then cancels the job, so a timed-out task leaves nothing queued behind.
    """

    def __init__(
        self,
        job_id: str,
        elastico_conn_id: str = "elastico_default",
        poll_interval: float = 2.0,
        timeout_s: float = 0.0,
        min_wait_s: float = 5.0,
    ) -> None:
        super().__init__()
        self.job_id = job_id
        self.elastico_conn_id = elastico_conn_id
        self.poll_interval = float(poll_interval)
        self.timeout_s = float(timeout_s)
        self.min_wait_s = float(min_wait_s)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "elastico_airflow.triggers.ElasticoAdmissionTrigger",
            {
                "job_id": self.job_id,
                "elastico_conn_id": self.elastico_conn_id,
                "poll_interval": self.poll_interval,
                "timeout_s": self.timeout_s,
                "min_wait_s": self.min_wait_s,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from elastico_airflow.hooks import ElasticoHook

        settings = await ElasticoHook(self.elastico_conn_id).aget_settings()
        reader = JobReader.shared(settings.state_url, lambda: ElasticoHook.open_service(settings), self.poll_interval)
        started = time.monotonic()
        deadline = started + self.timeout_s if self.timeout_s > 0 else None
        last_reason = None
        async with reader.watching(self.job_id):
            while True:
                job = await reader.get(self.job_id)
                if job is None:  # unknown or unreadable for now: keep waiting (the reader says why)
                    await asyncio.sleep(self.poll_interval)
                    continue
                status = job.status.value  # the event carries the name: trigger payloads are JSON
                if job.status not in WAITING_STATUSES:
                    await asyncio.sleep(max(0.0, started + self.min_wait_s - time.monotonic()))
                    yield TriggerEvent(
                        {"job_id": self.job_id, "status": status, "token": job.token, "reason": job.reason}
                    )
                    return
                if deadline is not None and time.monotonic() >= deadline:
                    yield TriggerEvent(
                        {"job_id": self.job_id, "status": "timeout", "token": None, "reason": job.reason}
                    )
                    return
                if job.reason != last_reason:
                    self.log.info("job %s waits: %s", self.job_id, job.reason)
                    last_reason = job.reason
                await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """The deferred task was marked failed, cleared or removed in Airflow: cancel its job.

        Otherwise the job stays queued with nobody waiting for it, and once admitted it holds GPUs that no
        launcher will use (the controller's start deadline would free them only later). Not called on a
        triggerer restart or hand-over, only on a user's action on the task.
        """
        from elastico_airflow.hooks import ElasticoHook

        settings = await ElasticoHook(self.elastico_conn_id).aget_settings()
        svc = await asyncio.to_thread(ElasticoHook.open_service, settings)
        try:
            job = await asyncio.to_thread(svc.get, self.job_id)
            if job.status in WAITING_STATUSES | {JobStatus.ADMITTED}:
                await asyncio.to_thread(
                    svc.cancel,
                    self.job_id,
                    "its deferred Airflow task was stopped (marked failed, cleared or removed) while it waited",
                )
                self.log.info("job %s cancelled: its deferred task was stopped in Airflow", self.job_id)
        except Exception as exc:  # the state is unreachable: the start deadline frees the GPUs later
            self.log.warning("could not cancel job %s (%s)", self.job_id, type(exc).__name__)
        finally:
            await asyncio.to_thread(svc.close)


class _StateJob:
    """The job's side of the supervise loop in the triggerer: batched reads, throughput reports."""

    def __init__(self, reader: JobReader, job_id: str, settings: ElasticoSettings) -> None:
        self.reader, self.job_id, self.settings = reader, job_id, settings

    async def read(self) -> Seen | None:
        job = await self.reader.get(self.job_id)
        return None if job is None else Seen(job.status, job.token, job.reason)

    async def report(self, token: str, summary: Summary) -> None:
        rate = fed_throughput(summary, self.settings)
        if not rate and not summary.done_items:
            return
        where = measured_on(summary, self.settings)

        def report(svc: Any) -> Any:  # progress (steps or rows, of how many) rides on the throughput report
            return svc.report_throughput(
                self.job_id, token, rate or None, measured_on=where, steps=summary.done_items, done=summary.samples,
                total_steps=summary.total_items, items=summary.items,
            )

        try:
            await self.reader.call(report)
        except Exception as exc:  # a stale token (the controller moved on) or the state is away: next time
            log.info("throughput report of %s not taken (%s)", token, type(exc).__name__)


def watch_side(ref: LaunchRef) -> Launch:
    """The ``Launch`` that watches ``ref`` from the triggerer."""
    if ref.launcher is Launcher.LOCAL:
        from elastico_airflow.local import LocalLaunch

        return LocalLaunch(ref)
    from elastico_airflow.podlaunch import PodLaunch

    return PodLaunch(ref)


class ElasticoLaunchTrigger(BaseTrigger):
    """Watch a launched job until its workload ends: the workload (a pod's phase and container state, a local
    process's pid and progress) and the job's state (switch, migration, cancel, preemption) — ``watch.supervise``.

    Fires ``{"status": "ended", ...}`` when the workload has ended (the task resumes to read how, report it
    and relaunch or finish), or ``{"status": "error", ...}`` if watching itself failed (the task resumes,
    finds the launch and defers again). Only the launch's reference, the connection id and the intervals
    are serialized — no URL, no credential.

    :param launch: ``LaunchRef.to_json()`` of the launch.
    :param elastico_conn_id: the connection locating the planner state.
    :param policy: ``WatchPolicy.to_json()``: poll, grace, kill and report intervals.
    :param resume: the task's counters (relaunches, watch errors), returned in every event with the launch:
        ``airflow dags test`` resumes a task with the event alone, not the method's kwargs.
    """

    def __init__(
        self,
        launch: dict[str, Any],
        elastico_conn_id: str = "elastico_default",
        policy: dict[str, Any] | None = None,
        resume: dict[str, int] | None = None,
    ) -> None:
        super().__init__()
        self.launch = dict(launch)
        self.elastico_conn_id = elastico_conn_id
        self.policy = dict(policy or WatchPolicy().to_json())
        self.resume = {k: int(v) for k, v in (resume or {}).items()}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "elastico_airflow.triggers.ElasticoLaunchTrigger",
            {"launch": self.launch, "elastico_conn_id": self.elastico_conn_id, "policy": self.policy, "resume": self.resume},
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from elastico_airflow.hooks import ElasticoHook

        ref = LaunchRef.from_json(self.launch)
        base = {"job_id": ref.job_id, "token": ref.token, "launch": self.launch, "resume": self.resume}
        try:
            settings = await ElasticoHook(self.elastico_conn_id).aget_settings()
            policy = policy_of(self.policy)
            reader = JobReader.shared(settings.state_url, lambda: ElasticoHook.open_service(settings), policy.poll_s)
            async with reader.watching(ref.job_id):
                watched = await supervise(
                    watch_side(ref), _StateJob(reader, ref.job_id, settings), MonotonicClock(), policy
                )
        except Exception as exc:
            self.log.exception("watching %s failed", ref.token)
            yield TriggerEvent({**base, "status": "error", "message": f"{type(exc).__name__}: {exc}"[:500]})
            return
        self.log.info("%s ended (%s)", ref.token, watched.probe.detail or "exited")
        yield TriggerEvent(
            {
                **base,
                "status": "ended",
                "requested": watched.requested.value,
                "terminated": watched.terminated,
                "exit_code": watched.probe.exit_code,
                "oom_killed": watched.probe.oom_killed,
                "detail": watched.probe.detail,
            }
        )

    async def on_kill(self) -> None:
        """The task was stopped in Airflow (marked failed, cleared, removed) while its job ran: stop the
        workload and give the job's GPUs back. Not called on a triggerer restart or hand-over."""
        from elastico_airflow.hooks import ElasticoHook

        ref = LaunchRef.from_json(self.launch)
        try:
            await watch_side(ref).terminate(force=False)
        except Exception as exc:
            self.log.warning("could not stop %s (%s)", ref.token, type(exc).__name__)
        try:
            settings = await ElasticoHook(self.elastico_conn_id).aget_settings()
            svc = await asyncio.to_thread(ElasticoHook.open_service, settings)
            try:
                await asyncio.to_thread(
                    svc.report_failed, ref.job_id, ref.token, "its Airflow task was stopped while the job ran"
                )
            finally:
                await asyncio.to_thread(svc.close)
        except Exception as exc:  # a stale token or the state is away: the controller's rules free it later
            self.log.warning("could not release job %s (%s)", ref.job_id, type(exc).__name__)
