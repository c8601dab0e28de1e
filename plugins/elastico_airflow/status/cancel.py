"""Who may cancel a job from the status page: whoever Airflow lets change that job's DAG runs.

The check is Airflow's own auth manager (``is_authorized_dag``, method ``PUT`` on the DAG's runs), so the
permission is the one that lets a person mark the run failed in Airflow's UI; a job submitted outside
Airflow (no DAG) needs that permission on every DAG. The cancel itself is ``JobService.cancel``: the job's
GPUs are released at once and its launcher stops the process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elastico_core.state import JobView


def may_cancel(user: Any, job: JobView) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    dag = job.identity.dag_id or None
    return bool(get_auth_manager().is_authorized_dag(
        method="PUT", access_entity=DagAccessEntity.RUN, details=DagDetails(id=dag) if dag else None, user=user))


def user_name(user: Any) -> str:
    getter = getattr(user, "get_name", None)
    return str(getter()) if callable(getter) else str(getattr(user, "username", ""))
