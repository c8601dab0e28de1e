"""MLflow as its users expect: experiments open on their runs, runs named after jobs and tagged with the
interference model that planned them, and the status page's links to those runs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mlflow")


def test_job_runs_are_tagged_and_linkable(tmp_path: Path) -> None:
    import mlflow

    from elastico_airflow.tracking import EXPERIMENT_KIND_TAG, MODEL_TRAINING, RunLinks, log_job_runs

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    summaries = [{"job_id": "bert-1", "workload": "bert", "knobs": {"micro_batch": 32}, "measured_throughput": 12.5}]
    ids = log_job_runs(uri, "training_runs", "manual__1", summaries)
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("elastico/training_runs")
    assert exp.tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING
    run = client.get_run(ids[0])
    assert run.info.run_name == "bert-1"
    assert run.data.tags["elastico.job_id"] == "bert-1"
    assert run.data.tags["elastico.iac.model"].startswith("table6")  # nothing registered: Table 6 planned it
    links = RunLinks(uri, "http://127.0.0.1:5000").get()
    assert links == {"bert-1": f"http://127.0.0.1:5000/#/experiments/{exp.experiment_id}/runs/{ids[0]}?workflowType=machine_learning"}
    assert RunLinks(uri, "").get() == {}


def test_an_existing_experiment_gets_the_view_tag(tmp_path: Path) -> None:
    import mlflow

    from elastico_airflow.tracking import EXPERIMENT_KIND_TAG, MODEL_TRAINING, ensure_experiment

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri)
    old = client.create_experiment("elastico/batch_labeling")
    assert ensure_experiment(client, "elastico/batch_labeling", uri) == old
    assert client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING
