"""The ElastiCo operator's extra links: from an Airflow task to its job on the status page and to its MLflow run.

Airflow 3 computes an operator link in the worker when the task finishes (``get_link`` with the task
instance as ``ti_key``) and keeps the URL in XCom, where the UI's button reads it. Both links follow from
the task instance's identity: the job id is derived from (dag_id, run_id, task_id, map_index) exactly as
the operator registered it, and its MLflow run is the one tagged with that job id.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from airflow.sdk import BaseOperatorLink


def job_id_of(ti_key: Any) -> str:
    """The ElastiCo job a task instance registered (``ExternalIdentity.derived_job_id``)."""
    from elastico_core.state import ExternalIdentity

    map_index = getattr(ti_key, "map_index", -1)
    identity = ExternalIdentity.airflow(ti_key.dag_id, ti_key.run_id, ti_key.task_id,
                                        -1 if map_index is None else int(map_index))
    return identity.derived_job_id()


def _airflow_url() -> str:
    from airflow.configuration import conf

    return (conf.get("api", "base_url", fallback="") or "").rstrip("/")


class ElasticoJobLink(BaseOperatorLink):
    """The job on ElastiCo's status page: its GPUs, progress, reason, decisions."""

    name = "ElastiCo job"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return f"{_airflow_url()}/elastico/status?job={urllib.parse.quote(job_id_of(ti_key))}"


class MlflowRunLink(BaseOperatorLink):
    """The job's MLflow run (throughput over time, its plan and switches); empty when MLflow is not set up."""

    name = "MLflow run"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from elastico_airflow.hooks import ElasticoHook
        from elastico_core.state.tracking import JOB_TAG, run_url

        settings = ElasticoHook(getattr(operator, "elastico_conn_id", ElasticoHook.default_conn_name)).get_settings()
        if not (settings.mlflow_tracking_uri and settings.mlflow_ui_url):
            return ""
        import mlflow

        client = mlflow.MlflowClient(tracking_uri=settings.mlflow_tracking_uri)
        experiment = client.get_experiment_by_name(f"elastico/{ti_key.dag_id}")
        if experiment is None:
            return ""
        found = client.search_runs([experiment.experiment_id], filter_string=f"tags.`{JOB_TAG}` = '{job_id_of(ti_key)}'",
                                   max_results=1)
        if not found:
            return ""
        return run_url(settings.mlflow_ui_url, found[0].info.experiment_id, found[0].info.run_id)
