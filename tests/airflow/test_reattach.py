"""A task retried after its worker died reattaches to the running job instead of launching it twice.

Local launcher: try 1 runs in a separate "worker" process that launches the workload and is SIGKILLed
before it could defer; the workload (its own session, like a pod) keeps running; try 2 registers again
(same identity), finds the job running and the recorded process, defers on its watch and sees it through
to the end — one launch only. Kubernetes launcher: try 2 finds try 1's pod by its labels (KPO's reattach)
and never creates another.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any
from unittest import mock

import psutil

from tests.airflow.conftest import (
    PLUGINS,
    REPO,
    Env,
    FakeTI,
    controller,
    fake_context,
    run_deferred,
    run_epochs,
    wait_until,
)

WORKER = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [{plugins!r}, {repo!r}]
    import tests.airflow.conftest as c
    from elastico_airflow.operators import ElasticoJobOperator
    from airflow.sdk.exceptions import TaskDeferred
    op = ElasticoJobOperator(task_id="train", workload="lstm", floor=1.0, knobs={{"micro_batch": [32]}},
                             entry_args=["--steps", "1500"], admission_grace_s=60)
    try:
        op.execute(c.fake_context(c.FakeTI(task_id="train", try_number=1)))
    except TaskDeferred:  # launched; this worker dies before the deferral reaches Airflow
        import time
        time.sleep(3600)
    """
)


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def test_local_retry_after_worker_death_reattaches(
    elastico_env: Env, cluster_file: Path, profiles_copy: Path, tmp_path: Path
) -> None:
    from elastico_airflow.operators import ElasticoJobOperator
    from elastico_core.state import ExternalIdentity, JobService

    script = WORKER.format(plugins=str(PLUGINS), repo=str(REPO))
    with controller(elastico_env.state_url, cluster_file, profiles_copy, tmp_path / "controller.log"):
        worker_log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 - closed when the worker is gone
        worker = subprocess.Popen(
            [sys.executable, "-c", script],
            env=elastico_env.process_env(),
            cwd=REPO,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            svc = JobService.open(elastico_env.state_url)
            identity = ExternalIdentity.airflow("test_dag", "run-1", "train")
            job = wait_until(lambda: svc.find(identity), 60, "the registration")
            progress = elastico_env.workdir / job.id / "progress.jsonl"
            wait_until(lambda: sum(e["event"] == "step" for e in _events(progress)) >= 3, 120, "training steps")
            pid = next(e["pid"] for e in _events(progress) if e["event"] == "start")
            os.killpg(worker.pid, signal.SIGKILL)  # the worker dies; its job's process does not
            worker.wait(timeout=10)
            assert psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
            assert svc.get(job.id).status.value == "running"

            op = ElasticoJobOperator(
                task_id="train",
                workload="lstm",
                floor=1.0,
                knobs={"micro_batch": [32]},
                entry_args=["--steps", "1500"],
                watch_interval=0.3,
            )
            ctx = fake_context(FakeTI(task_id="train", try_number=2))
            result = run_deferred(op, ctx, lambda: op.execute(ctx))
            assert [d.method_name for d in op.deferrals] == ["execute_launched"]
            assert result["status"] == "finished" and result["job_id"] == job.id
            events = _events(progress)
            assert [e["event"] for e in events].count("start") == 1, "the job was launched twice"
            assert events[-1]["event"] == "done" and events[-1]["step"] == 1500
            final = svc.get(job.id)
            assert final.status.value == "finished" and final.last_try == 2 and final.attempts == 1
            svc.close()
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
            worker_log.close()
            for e in _events(elastico_env.workdir / (job.id if "job" in dir() else "-") / "progress.jsonl"):
                if e["event"] == "start" and psutil.pid_exists(e["pid"]):
                    psutil.Process(e["pid"]).kill()


def _pod(name: str, labels: dict[str, str], phase: str = "Running") -> Any:
    from kubernetes.client import models as k8s

    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, namespace="elastico", labels=labels),
        status=k8s.V1PodStatus(
            phase=phase,
            container_statuses=[
                k8s.V1ContainerStatus(
                    name="base",
                    image="x",
                    image_id="x",
                    ready=phase == "Running",
                    restart_count=0,
                    state=k8s.V1ContainerState(
                        terminated=k8s.V1ContainerStateTerminated(exit_code=0, reason="Completed")
                    )
                    if phase == "Succeeded"
                    else k8s.V1ContainerState(running=k8s.V1ContainerStateRunning()),
                )
            ],
        ),
    )


def _kpo_operator(events: list[dict[str, Any]], existing: list[Any]) -> Any:
    """An operator whose Kubernetes client and pod manager are fakes (KPO's own control flow runs for real)."""
    from elastico_airflow.operators import ElasticoJobOperator

    op = ElasticoJobOperator(
        task_id="train",
        workload="lstm",
        floor=1.0,
        knobs={"micro_batch": [32]},
        entry_args=["--steps", "4"],
        launcher="kubernetes",
        watch_interval=0.1,
    )
    client = mock.MagicMock()
    pods: list[Any] = list(existing)

    def list_pods(namespace: str, label_selector: str) -> Any:
        return mock.MagicMock(items=[p for p in pods if (p.metadata.labels or {}).get("already_checked") != "True"])

    def create(pod: Any) -> Any:
        pods.append(_pod(pod.metadata.name, dict(pod.metadata.labels)))
        return pod

    client.list_namespaced_pod.side_effect = list_pods
    manager = mock.MagicMock()
    manager.create_pod.side_effect = create
    manager.extract_xcom.return_value = json.dumps({"exit_code": 0, "events": events})
    manager.await_pod_completion.side_effect = lambda pod, *a, **k: _pod(pod.metadata.name, {}, "Succeeded")
    hook = mock.MagicMock(is_in_cluster=False)
    hook.get_xcom_sidecar_container_image.return_value = None
    hook.get_xcom_sidecar_container_resources.return_value = None
    hook.get_pod.side_effect = lambda name, namespace: _pod(name, {}, "Succeeded")
    op.__dict__.update(client=client, pod_manager=manager, hook=hook)
    return op


def _through_the_watch(op: Any, ctx: dict[str, Any]) -> Any:
    """The task deferred on the pod's watch; resume it as the trigger does once the pod has ended."""
    from airflow.sdk.exceptions import TaskDeferred

    try:
        op.execute(ctx)
    except TaskDeferred as deferral:
        assert deferral.method_name == "execute_launched"
        assert deferral.trigger.serialize()[1]["launch"]["launcher"] == "kubernetes"
        event = {"status": "ended", "requested": "continue", "exit_code": None, "oom_killed": False}
        return op.execute_launched(ctx, event=event, **deferral.kwargs)
    raise AssertionError("the task did not defer on the pod's watch")


EVENTS = [
    {"event": "start", "t": 1.0, "device": "cuda:0", "knobs": {}, "step": 0},
    *(
        {
            "event": "step",
            "t": 1.0 + i,
            "step": i,
            "samples": 32.0 * i,
            "n": 32,
            "dt_s": 0.1,
            "rate": 320.0,
            "mem_mib": 900.0,
        }
        for i in range(1, 5)
    ),
    {"event": "done", "t": 6.0, "step": 4, "samples": 128.0},
]


def test_kubernetes_launch_reports_the_pods_measurements(
    elastico_env: Env, cluster_file: Path, profiles_copy: Path
) -> None:
    from elastico_core.state import JobService

    op = _kpo_operator(EVENTS, [])
    ctx = fake_context(FakeTI(task_id="train"))
    svc = JobService.open(elastico_env.state_url)
    try:
        job = svc.register(op.job_document(), _identity(), try_number=1).job
        run_epochs(elastico_env.state_url, cluster_file, profiles_copy)
        result = _through_the_watch(op, ctx)
        assert result["status"] == "finished"
        assert op.pod_manager.create_pod.call_count == 1
        created = op.pod_manager.create_pod.call_args.kwargs["pod"]
        assert created.spec.scheduler_name == "hami-scheduler"
        assert created.metadata.labels["elastico.io/job"] == job.id.replace(":", "-")[:63].strip("-_.")
        final = svc.get(job.id)
        assert final.measured_throughput == 320.0  # from the pod's XCom, measured on a GPU
        assert op.pod_manager.delete_pod.called  # KPO's cleanup ran
    finally:
        svc.close()


def test_kubernetes_retry_reattaches_to_the_running_pod(
    elastico_env: Env, cluster_file: Path, profiles_copy: Path
) -> None:
    from elastico_core.state import JobService

    svc = JobService.open(elastico_env.state_url)
    try:
        job = svc.register(
            {"workload": "lstm", "floor": 1.0, "gpus": 1, "priority": 0, "weight": 1.0, "knobs": {"micro_batch": [32]}},
            _identity(),
            try_number=1,
        ).job
        run_epochs(elastico_env.state_url, cluster_file, profiles_copy)
        svc.report_started(job.id, svc.get(job.id).token)  # try 1 had created its pod, then its worker died
        labels = {
            "dag_id": "test_dag",
            "task_id": "train",
            "run_id": "run-1",
            "kubernetes_pod_operator": "True",
            "try_number": "1",
            "app.kubernetes.io/managed-by": "elastico",
        }
        op = _kpo_operator(EVENTS, [_pod("train-abc123", labels)])
        result = _through_the_watch(op, fake_context(FakeTI(task_id="train", try_number=2)))
        assert result["status"] == "finished"
        assert op.pod_manager.create_pod.call_count == 0, "a second pod was launched"
        selector = op.client.list_namespaced_pod.call_args.kwargs["label_selector"]
        assert "dag_id=test_dag" in selector and "try_number" not in selector
        assert svc.get(job.id).last_try == 2
    finally:
        svc.close()


def _identity() -> Any:
    from elastico_core.state import ExternalIdentity

    return ExternalIdentity.airflow("test_dag", "run-1", "train")
