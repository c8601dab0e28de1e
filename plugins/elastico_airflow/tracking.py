"""MLflow records of a DAG run's jobs: what ElastiCo chose (params) and what it got (metrics).

Called by the example DAGs' final task, once per DAG run (one process imports MLflow, not every task).
Only job values are logged — workload, knobs, GPUs, predicted and measured throughput — never a
connection field, URL or token. A tracking URI with credentials is used, never logged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PARAM_KEYS = ("workload", "kind", "status")
METRIC_KEYS = ("predicted_throughput", "measured_throughput", "predicted_slowdown", "memory_mib", "steps", "samples")


def job_params(summary: Mapping[str, Any]) -> dict[str, str]:
    params = {k: str(summary.get(k)) for k in PARAM_KEYS if summary.get(k) is not None}
    for name, value in sorted((summary.get("knobs") or {}).items()):
        params[f"knob.{name}"] = str(value)
    params["gpus"] = ",".join(summary.get("gpus") or []) or "-"
    params["colocated_with"] = ",".join(summary.get("partners") or []) or "-"
    return params


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


def log_job_runs(tracking_uri: str, dag_id: str, run_id: str, summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """One MLflow run per job, in experiment ``elastico/<dag_id>``; returns the MLflow run ids."""
    if not tracking_uri:
        return []
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    experiment = f"elastico/{dag_id}"
    if mlflow.get_experiment_by_name(experiment) is None:
        mlflow.create_experiment(experiment, artifact_location=_artifact_location(tracking_uri))
    mlflow.set_experiment(experiment)
    ids = []
    for summary in summaries:
        if not isinstance(summary, Mapping) or not summary.get("job_id"):
            continue
        with mlflow.start_run(run_name=str(summary["job_id"])) as run:
            mlflow.set_tags(
                {"elastico.job_id": str(summary["job_id"]), "airflow.dag_id": dag_id, "airflow.run_id": run_id}
            )
            mlflow.log_params(job_params(summary))
            metrics = job_metrics(summary)
            if metrics:
                mlflow.log_metrics(metrics)
            ids.append(run.info.run_id)
    return ids
