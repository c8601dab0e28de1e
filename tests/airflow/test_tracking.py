"""MLflow as its users expect, on the Airflow side: experiments open on their runs, and each ElastiCo task
links to its job on the status page and to its MLflow run (operator extra links)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("mlflow")


def test_an_existing_experiment_gets_the_view_tag(tmp_path: Path) -> None:
    import mlflow

    from elastico_airflow.tracking import EXPERIMENT_KIND_TAG, MODEL_TRAINING, ensure_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri)
    old = client.create_experiment("elastico/batch_labeling")
    assert ensure_experiment(client, "elastico/batch_labeling", uri) == old
    assert client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING


@dataclass
class TiKey:
    dag_id: str = "training_runs"
    run_id: str = "manual__2026-12-06T10:00:00+00:00"
    task_id: str = "train"
    map_index: int = 1


def test_the_operator_links_to_its_job_and_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The links a finished task shows in Airflow: its job on the status page, its MLflow run (the mirror's)."""
    import json

    import mlflow

    from elastico_airflow.links import ElasticoJobLink, MlflowRunLink, job_id_of
    from elastico_airflow.operators import ElasticoJobOperator
    from elastico_core.state import ExternalIdentity

    key = TiKey()
    job_id = job_id_of(key)
    assert job_id == ExternalIdentity.airflow(key.dag_id, key.run_id, key.task_id, 1).derived_job_id()
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://airflow.example:8080")
    op = ElasticoJobOperator(task_id="train", workload="lstm")
    assert {type(link) for link in op.operator_extra_links} == {ElasticoJobLink, MlflowRunLink}
    assert ElasticoJobLink().get_link(op, ti_key=key) == f"http://airflow.example:8080/elastico/status?job={job_id}"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("AIRFLOW_CONN_ELASTICO_DEFAULT", json.dumps(
        {"conn_type": "elastico", "extra": {"mlflow_tracking_uri": uri, "mlflow_ui_url": "http://mlflow.example"}}))
    assert MlflowRunLink().get_link(op, ti_key=key) == ""  # no run yet: no link, not a broken one
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("elastico/training_runs")
    run = client.create_run(exp, tags={"elastico.job_id": job_id}, run_name=job_id)
    link = MlflowRunLink().get_link(op, ti_key=key)
    assert link == f"http://mlflow.example/#/experiments/{exp}/runs/{run.info.run_id}?workflowType=machine_learning"
