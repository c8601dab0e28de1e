"""A deferred task stopped in Airflow (marked failed, cleared, removed) cancels its queued job: the trigger's
``on_kill``, which the triggerer calls only on such a user action (never on a restart or hand-over)."""

from __future__ import annotations

import asyncio

from tests.airflow.conftest import Env


def test_on_kill_cancels_the_waiting_job(elastico_env: Env) -> None:
    from elastico_airflow.triggers import ElasticoAdmissionTrigger
    from elastico_core.state import JobService, JobStatus

    svc = JobService.open(elastico_env.state_url)
    try:
        svc.submit_document("jobs:\n  - {id: waiting, workload: bert, floor: 100}\n  - {id: done, workload: bert}\n")
        svc.cancel("done", "cancelled earlier")
        asyncio.run(ElasticoAdmissionTrigger("waiting").on_kill())
        job = svc.get("waiting")
        assert job.status is JobStatus.CANCELLED and "deferred Airflow task was stopped" in job.reason
        asyncio.run(ElasticoAdmissionTrigger("done").on_kill())  # an ended job is left as it is
        assert svc.get("done").reason == "cancelled earlier"
        asyncio.run(ElasticoAdmissionTrigger("ghost").on_kill())  # an unknown job: a warning, no exception
    finally:
        svc.close()
