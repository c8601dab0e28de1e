"""Each job as an MLflow run, from the planner state: started when the job started, throughput as a time
series, the plan and every switch as events, a link back to the Airflow task; idempotent and incremental."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO

mlflow = pytest.importorskip("mlflow")


@pytest.fixture
def started(tmp_path: Path) -> str:
    """One Airflow job admitted, started and reporting twice; one CLI job that never started."""
    from elastico_core.rst.store import ProfileStore
    from elastico_core.specs import parse_cluster
    from elastico_core.state import ExternalIdentity, JobService, StateStore
    from elastico_core.state.controller import Controller, ControllerConfig

    url = f"sqlite:///{tmp_path / 'state.db'}"
    svc = JobService.open(url)
    svc.register({"workload": "lstm", "floor": 1, "knobs": {"micro_batch": [32, 64]}},
                 ExternalIdentity.airflow("training_runs", "manual__1", "train", 0), try_number=1)
    svc.register({"id": "never", "workload": "llama-3-7b", "floor": 99999})
    text = (REPO / "examples/cluster.yaml").read_text()
    ctl = Controller(StateStore.open(url), parse_cluster(text, "c"), ProfileStore.open(REPO / "profiles"),
                     config=ControllerConfig(interval_s=0), cluster_yaml=text)
    ctl.run_epoch()
    ctl.close()
    job = next(j for j in svc.list_jobs() if j.identity.dag_id)
    svc.report_started(job.id, job.token)
    svc.report_throughput(job.id, job.token, 800.0, steps=5, done=160.0, total_steps=20)
    svc.report_throughput(job.id, job.token, 900.0, steps=10, done=320.0, total_steps=20)
    svc.close()
    return url


def test_a_started_job_is_a_run_with_a_time_series_events_and_links(started: str, tmp_path: Path) -> None:
    from elastico_core.state import JobService
    from elastico_core.state.tracking import JOB_TAG, Follower, RunMirror

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    svc = JobService.open(started)
    mirror = RunMirror(uri, "http://127.0.0.1:8080", {"elastico.iac.model": "table6"})
    follower = Follower(svc, mirror)
    assert follower.round() == 1  # the started job only; "never" gets no run
    job = next(j for j in svc.list_jobs() if j.identity.dag_id)
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("elastico/training_runs")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.run_name == job.id and run.data.tags[JOB_TAG] == job.id
    assert run.info.start_time == int(job.started_at.timestamp() * 1000)  # the job's start, not the sync's
    assert run.info.status == "RUNNING"
    tags = run.data.tags
    assert tags["airflow.dag_id"] == "training_runs" and tags["airflow.task_id"] == "train" and tags["airflow.map_index"] == "0"
    assert "http://127.0.0.1:8080/dags/training_runs/runs/manual__1/tasks/train/mapped/0" in tags["mlflow.note.content"]
    assert f"/elastico/status?job={job.id}" in tags["mlflow.note.content"]
    series = client.get_metric_history(run.info.run_id, "throughput")
    assert [m.value for m in sorted(series, key=lambda m: m.step)] == [800.0, 900.0]
    assert client.get_metric_history(run.info.run_id, "progress")[-1].value == pytest.approx(0.5)
    assert run.data.params["workload"] == "lstm" and run.data.params["space.micro_batch"] == "[32, 64]"
    assert any(k.startswith("plan.") for k in run.data.params)
    events = json.loads(Path(client.download_artifacts(run.info.run_id, "elastico/events.json", str(tmp_path))).read_text())
    assert [e["kind"] for e in events["events"]] == ["admit"] and events["events"][0]["to_gpus"]

    # again: nothing is logged twice; a new report is one more point; the end ends the run
    follower.round()
    assert len(client.get_metric_history(run.info.run_id, "throughput")) == 2
    svc.report_throughput(job.id, job.token, 950.0, steps=15, done=480.0, total_steps=20)
    svc.report_finished(job.id, job.token, 940.0)
    restarted = Follower(svc, RunMirror(uri, "http://127.0.0.1:8080"))  # a new process: state from the run's tags
    restarted.round()
    assert [m.value for m in client.get_metric_history(run.info.run_id, "throughput")] == [800.0, 900.0, 950.0, 940.0]
    done = client.get_run(run.info.run_id)
    assert done.info.status == "FINISHED" and done.info.end_time == int(svc.get(job.id).finished_at.timestamp() * 1000)
    assert len(client.search_runs([exp.experiment_id])) == 1
    svc.close()


def test_a_dag_runs_last_task_fills_in_what_no_controller_mirrored(started: str, tmp_path: Path) -> None:
    import sys

    pytest.importorskip("airflow")
    sys.path.insert(0, str(REPO / "plugins"))
    from elastico_airflow.settings import ElasticoSettings
    from elastico_airflow.tracking import RunLinks, sync_dag_jobs
    from elastico_core.state import JobService

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    svc = JobService.open(started)
    ids = [j.id for j in svc.list_jobs()]
    svc.close()
    runs = sync_dag_jobs(ElasticoSettings(state_url=started, mlflow_tracking_uri=uri), ids)
    assert len(runs) == 1 and "never" not in runs
    assert sync_dag_jobs(ElasticoSettings(state_url=started, mlflow_tracking_uri=uri), ids) == runs  # idempotent
    links = RunLinks(uri, "http://127.0.0.1:5000").get()
    (job_id, run_id), = runs.items()
    assert links[job_id].endswith(f"/runs/{run_id}?workflowType=machine_learning")
