"""MLflow records of a DAG run's jobs: what ElastiCo chose (params) and what it got (metrics).

Called by the example DAGs' final task, once per DAG run (one process imports MLflow, not every task).
Only job values are logged — workload, knobs, GPUs, predicted and measured throughput — never a
connection field, URL or token. A tracking URI with credentials is used, never logged.

MLflow's own conventions: each experiment carries ``mlflow.experimentKind = custom_model_development``
(MLflow 3's UI then treats it as "Model training", not GenAI) and every link ElastiCo prints or shows
carries ``?workflowType=machine_learning``, which MLflow 3.17's view switch reads first; each run is
named after its job; each run is tagged with the interference model that planned it (registered name,
version and alias, read from the registry when the run is logged).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PARAM_KEYS = ("workload", "kind", "status")
METRIC_KEYS = ("predicted_throughput", "measured_throughput", "predicted_slowdown", "memory_mib", "steps", "samples")
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"  # read by MLflow 3's UI to pick an experiment's view
MODEL_TRAINING = "custom_model_development"  # the "Model training" view (runs table)
# MLflow 3.17's UI picks its view from a GenAI / Model training switch (``?workflowType=`` or the browser's
# last choice) before it reads the experiment's tag: links carry the switch so they open on runs
WORKFLOW_QUERY = "workflowType=machine_learning"
JOB_TAG = "elastico.job_id"
IAC_MODEL = "elastico-iac"
IAC_ALIAS = "champion"


def job_params(summary: Mapping[str, Any]) -> dict[str, str]:
    params = {k: str(summary.get(k)) for k in PARAM_KEYS if summary.get(k) is not None}
    for name, value in sorted((summary.get("knobs") or {}).items()):
        params[f"knob.{name}"] = str(value)
    params["gpus"] = ",".join(summary.get("gpus") or []) or "-"
    params["colocated_with"] = ",".join(summary.get("partners") or []) or "-"
    return params


def queue_tags(summary: Mapping[str, Any]) -> dict[str, str]:
    """The job's queue and, on a cluster with queues, its queue's borrowed and lent GPUs after the last epoch
    and how often the job was reclaimed (``elastico.queue*``)."""
    out = {"elastico.queue": str(summary.get("queue") or "default")}
    state = summary.get("queue_state")
    if isinstance(state, Mapping):
        for key in ("nominal_gpus", "used_gpus", "borrowed_gpus", "lent_gpus"):
            if key in state:
                out[f"elastico.queue.{key}"] = str(state[key])
        out["elastico.queue.state"] = "borrowing" if float(state.get("borrowed_gpus") or 0) > 0 else (
            "lending" if float(state.get("lent_gpus") or 0) > 0 else "within nominal")
    if summary.get("reclaims") is not None:
        out["elastico.reclaims"] = str(summary["reclaims"])
    return out


def job_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key in METRIC_KEYS:
        value = summary.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    return out


def _artifact_location(tracking_uri: str) -> str | None:
    """Beside a SQLite store (``mlartifacts/``, as the project's embedded default); the server's otherwise."""
    if tracking_uri.startswith("sqlite:///"):
        from pathlib import Path

        return (Path(tracking_uri.removeprefix("sqlite:///")).parent / "mlartifacts").absolute().as_uri()
    return None


def ensure_experiment(client: Any, name: str, tracking_uri: str) -> str:
    """The experiment's id, created if missing, tagged so MLflow's UI opens it on its runs."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        experiment_id = str(client.create_experiment(name, artifact_location=_artifact_location(tracking_uri),
                                                     tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING}))
    else:
        experiment_id = str(exp.experiment_id)
        if exp.tags.get(EXPERIMENT_KIND_TAG) != MODEL_TRAINING:
            client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
    return experiment_id


def iac_tags(client: Any) -> dict[str, str]:
    """Which interference model planned the jobs: the registered ``elastico-iac@champion``, or none."""
    try:
        mv = client.get_model_version_by_alias(IAC_MODEL, IAC_ALIAS)
    except Exception:  # no model registered (or no registry): the planner used Table 6's pairs
        return {"elastico.iac.model": "table6 (no registered model)"}
    return {"elastico.iac.model": IAC_MODEL, "elastico.iac.version": str(mv.version), "elastico.iac.alias": IAC_ALIAS,
            "elastico.iac.run_id": str(mv.run_id or "")}


def log_job_runs(tracking_uri: str, dag_id: str, run_id: str, summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """One MLflow run per job (named after it), in experiment ``elastico/<dag_id>``; returns the run ids."""
    if not tracking_uri:
        return []
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    client = mlflow.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    experiment_id = ensure_experiment(client, f"elastico/{dag_id}", tracking_uri)
    planned_by = iac_tags(client)
    ids = []
    for summary in summaries:
        if not isinstance(summary, Mapping) or not summary.get("job_id"):
            continue
        with mlflow.start_run(experiment_id=experiment_id, run_name=str(summary["job_id"])) as run:
            tags = {JOB_TAG: str(summary["job_id"]), "airflow.dag_id": dag_id, "airflow.run_id": run_id, **planned_by}
            if summary.get("task_id"):
                tags["airflow.task_id"] = str(summary["task_id"])
            tags.update(queue_tags(summary))
            mlflow.set_tags(tags)
            mlflow.log_params(job_params(summary))
            metrics = job_metrics(summary)
            if metrics:
                mlflow.log_metrics(metrics)
            ids.append(run.info.run_id)
    return ids


def run_url(ui_url: str, experiment_id: str, run_id: str) -> str:
    """The MLflow UI page of one run."""
    return (f"{ui_url.rstrip('/')}/#/experiments/{urllib.parse.quote(experiment_id)}/runs/{urllib.parse.quote(run_id)}"
            f"?{WORKFLOW_QUERY}")


@dataclass
class RunLinks:
    """Job id -> its newest MLflow run's page, looked up by the ``elastico.job_id`` tag and kept ``ttl_s``
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
                for r in runs:
                    job = r.data.tags.get(JOB_TAG)
                    if job and job not in links:
                        links[job] = run_url(self.ui_url, r.info.experiment_id, r.info.run_id)
        except Exception:  # MLflow down: the page shows no run links, nothing else changes
            links = {}
        self._links, self._at = links, time.monotonic()
        return links
