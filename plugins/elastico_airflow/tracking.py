"""MLflow on the Airflow side: a DAG run's jobs brought up to date as MLflow runs, and links to those runs.

The runs themselves are ``elastico_core.state.tracking``'s (one per job: started with the job, its
throughput a time series, its plan and switches as events, a link back to the Airflow task); the
controller keeps them current while jobs run. A DAG's last task calls ``sync_dag_jobs`` once for its jobs,
which finishes their runs and creates any the controller's mirror has not (a deployment whose controller
runs without MLflow). Nothing here logs a connection field, URL or token; a tracking URI with
credentials is used, never logged.

MLflow's own conventions: each experiment carries ``mlflow.experimentKind = custom_model_development``
and every link ElastiCo prints or shows carries ``?workflowType=machine_learning``, which MLflow 3.17's
view switch reads first; ``scripts/mlflow_ui.py`` serves the UI with that switch on by default, so its
experiment list opens on runs too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from elastico_core.state.tracking import (
    EXPERIMENT_KIND_TAG,
    JOB_TAG,
    MODEL_TRAINING,
    WORKFLOW_QUERY,
    artifact_location,
    run_url,
)

__all__ = ["EXPERIMENT_KIND_TAG", "JOB_TAG", "MODEL_TRAINING", "WORKFLOW_QUERY", "RunLinks", "ensure_experiment",
           "run_url", "sync_dag_jobs"]


def ensure_experiment(client: Any, name: str, tracking_uri: str) -> str:
    """The experiment's id, created if missing, tagged so MLflow's UI opens it on its runs."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return str(client.create_experiment(name, artifact_location=artifact_location(tracking_uri),
                                            tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING}))
    if exp.tags.get(EXPERIMENT_KIND_TAG) != MODEL_TRAINING:
        client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
    return str(exp.experiment_id)


def airflow_ui_url() -> str:
    """The Airflow UI's address (``[api] base_url``), for the links a run carries back to its task."""
    from airflow.configuration import conf

    return (conf.get("api", "base_url", fallback="") or "").rstrip("/")


def sync_dag_jobs(settings: Any, job_ids: Sequence[str]) -> dict[str, str]:
    """Bring the MLflow runs of ``job_ids`` up to date (job id -> run id); {} without a tracking URI."""
    if not settings.mlflow_tracking_uri or not job_ids:
        return {}
    from elastico_core.state import JobService, StateStore
    from elastico_core.state.probe import read_only_url, require_state
    from elastico_core.state.tracking import RunMirror, iac_tags, sync_jobs

    found = require_state(settings.state_url)
    svc = JobService(StateStore.open(read_only_url(found.url), upgrade=False))
    try:
        mirror = RunMirror(settings.mlflow_tracking_uri, airflow_ui_url(), iac_tags(settings.mlflow_tracking_uri))
        return sync_jobs(svc, mirror, job_ids)
    finally:
        svc.close()


@dataclass
class RunLinks:
    """Job id -> its MLflow run's page, looked up by the ``elastico.job_id`` tag and kept ``ttl_s``
    seconds (the status page refreshes every 10 s; one search per refresh at most)."""

    tracking_uri: str
    ui_url: str
    ttl_s: float = 30.0
    _at: float = 0.0
    _links: dict[str, str] | None = None

    def get(self) -> dict[str, str]:
        if not (self.tracking_uri and self.ui_url):
            return {}
        if self._links is not None and time.monotonic() - self._at < self.ttl_s:
            return self._links
        links: dict[str, str] = {}
        try:
            import mlflow

            client = mlflow.MlflowClient(tracking_uri=self.tracking_uri)
            exps = [e for e in client.search_experiments() if e.name.startswith("elastico/")]
            if exps:
                runs = client.search_runs([e.experiment_id for e in exps], filter_string=f"tags.`{JOB_TAG}` != ''",
                                          order_by=["attributes.start_time DESC"], max_results=1000)
                for r in runs:  # the newest thousand jobs; one run per job (the mirror's)
                    job = r.data.tags.get(JOB_TAG)
                    if job and job not in links:
                        links[job] = run_url(self.ui_url, r.info.experiment_id, r.info.run_id)
        except Exception:  # MLflow down: the page shows no run links, nothing else changes
            links = {}
        self._links, self._at = links, time.monotonic()
        return links
