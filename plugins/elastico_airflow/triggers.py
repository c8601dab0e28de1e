"""``ElasticoAdmissionTrigger``: waits in the triggerer until the controller admits (or ends) a job.

While a job is queued no worker slot is held: the task is deferred and this coroutine polls the planner
state every ``poll_interval`` seconds. The state API is blocking (SQLAlchemy), so every call runs in a
thread (``asyncio.to_thread``) and the triggerer's event loop is never blocked.

Only the job id, the connection id and the interval are serialized into the trigger row: the state URL
(which may hold a password) is resolved from the connection inside the triggerer, never stored.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from elastico_core.state.values import JobStatus

WAITING_STATUSES = frozenset({JobStatus.PENDING})


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
        svc = await asyncio.to_thread(ElasticoHook.open_service, settings)
        started = time.monotonic()
        deadline = started + self.timeout_s if self.timeout_s > 0 else None
        try:
            last_reason = None
            while True:
                try:
                    job = await asyncio.to_thread(svc.get, self.job_id)
                except Exception as exc:  # the state is briefly unreachable: keep waiting, say why
                    self.log.warning("cannot read job %s (%s); retrying", self.job_id, type(exc).__name__)
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
        finally:
            await asyncio.to_thread(svc.close)

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
                await asyncio.to_thread(svc.cancel, self.job_id, "its deferred Airflow task was stopped (marked failed, "
                                        "cleared or removed) while it waited")
                self.log.info("job %s cancelled: its deferred task was stopped in Airflow", self.job_id)
        except Exception as exc:  # the state is unreachable: the start deadline frees the GPUs later
            self.log.warning("could not cancel job %s (%s)", self.job_id, type(exc).__name__)
        finally:
            await asyncio.to_thread(svc.close)
