"""Queues through the Airflow operator on the local launcher: a team-A task running on quota team B lent is
reclaimed when B submits (its process checkpoints and the task defers until it is admitted again), B is
admitted at once (``reclaim_epochs: 1``), and nothing is lost."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.conftest import Env, FakeTI, fake_context, first_event, run_epochs, wait_until
from tests.airflow.test_operator_local import deferred, progress_events

TEAMS = """\
cluster:
  name: teams
  m_sys_mib: 512
  max_jobs_per_gpu: 2
  reclaim_epochs: 1
  nodes:
    - {name: gpu-node, count: 1, gpu: a100-40gb, gpus: 2, cpu_cores: 64, host_mem_gib: 256}
  queues:
    - {name: team-a, cohort: org, nominal_quota: {gpus: 1}}
    - {name: team-b, cohort: org, nominal_quota: {gpus: 1}}
"""


def test_a_borrowing_task_is_reclaimed_and_waits_again(elastico_env: Env, tmp_path: Path, profiles_copy: Path) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    from elastico_airflow.operators import ElasticoJobOperator
    from elastico_core.state import DecisionKind, JobService, JobStatus

    cluster = tmp_path / "teams.yaml"
    cluster.write_text(TEAMS)
    svc = JobService.open(elastico_env.state_url)
    try:
        run_epochs(elastico_env.state_url, cluster, profiles_copy)  # the controller records its cluster
        svc.submit_document("jobs:\n" + "".join(
            f"  - {{id: a{i}, workload: lstm, floor: 10, queue: team-a, knobs: {{micro_batch: [32]}}}}\n" for i in range(2)))
        op = ElasticoJobOperator(task_id="train", workload="lstm", floor=1.0, knobs={"micro_batch": [32]},
                                 elastico_queue="team-a", entry_args=["--steps", "100000", "--max-seconds", "120"],
                                 admission_grace_s=0, switch_grace_s=60)
        ctx = fake_context(FakeTI(task_id="train"))
        d = deferred(op, ctx)
        job_id = d.kwargs["job_id"]
        assert svc.get(job_id).queue == "team-a"
        run_epochs(elastico_env.state_url, cluster, profiles_copy)
        for j in ("a0", "a1"):  # a stand-in launcher for the other two of team A
            svc.report_started(j, svc.get(j).token or "")
        assert {q.name: q for q in svc.queues()}["team-a"].borrowed_gpus > 0  # three jobs on a nominal quota of 1

        outcome: dict[str, Any] = {}

        def task() -> None:
            """As Airflow runs it: launch and defer while the job runs; the watch (the launch trigger) fires
            when the process has checkpointed for the reclaim; the task resumes and defers on admission."""
            try:
                outcome["result"] = op.execute_admitted(ctx, None, **d.kwargs)
            except TaskDeferred as launched:
                outcome["launched"] = launched
                try:
                    event = first_event(launched.trigger)
                    outcome["result"] = getattr(op, launched.method_name)(ctx, event=event.payload, **launched.kwargs)
                except BaseException as exc:
                    outcome["raised"] = exc
            except BaseException as exc:
                outcome["raised"] = exc

        thread = threading.Thread(target=task, daemon=True)
        thread.start()
        progress = elastico_env.workdir / job_id / "progress.jsonl"
        wait_until(lambda: progress.exists() and any(e["event"] == "step" for e in progress_events(elastico_env.workdir, job_id)),
                   120, "the team-A task's process to train")
        svc.submit_document("jobs:\n" + "".join(
            f"  - {{id: b{i}, workload: lstm, floor: 10, queue: team-b, knobs: {{micro_batch: [32]}}}}\n" for i in range(2)))
        run_epochs(elastico_env.state_url, cluster, profiles_copy)
        assert all(svc.get(f"b{i}").status is JobStatus.ADMITTED for i in range(2))  # B within the deadline
        reclaimed = svc.get(job_id)
        assert reclaimed.status is JobStatus.PENDING and reclaimed.queue_code == "reclaimed"
        assert "reclaimed by queue team-b" in reclaimed.reason and "checkpointed and requeued" in reclaimed.reason
        assert svc.decisions(job_id=job_id, limit=5)[0].kind is DecisionKind.PREEMPT
        thread.join(150)
        assert not thread.is_alive()
        assert outcome["launched"].method_name == "execute_launched"  # no worker slot held while it ran
        raised = outcome.get("raised")
        assert isinstance(raised, TaskDeferred) and raised.method_name == "execute_admitted"  # waits, no slot held
        events = [e["event"] for e in progress_events(elastico_env.workdir, job_id)]
        assert "checkpointed" in events and events.count("start") == 1
        assert {j.id for j in svc.list_jobs()} == {"a0", "a1", "b0", "b1", job_id}  # nothing lost
        assert all(g.used_mem_mib >= 0 for g in svc.gpus())
    finally:
        svc.close()


@pytest.mark.parametrize(("param", "extra", "expected"), [("team-b", {}, "team-b"), (None, {"queue": "team-a"}, "team-a"),
                                                          (None, {}, None)])
def test_the_queue_comes_from_the_task_or_the_connection(param: str | None, extra: dict[str, str], expected: str | None,
                                                         elastico_env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """``elastico_queue`` (not Airflow's own ``queue``/``pool``), else the connection's ``queue``, else none."""
    from elastico_airflow.hooks import ElasticoHook
    from elastico_airflow.operators import ElasticoJobOperator

    monkeypatch.setenv("AIRFLOW_CONN_ELASTICO_DEFAULT", elastico_env.connection(**extra))
    op = ElasticoJobOperator(task_id="t", workload="lstm", elastico_queue=param, queue="gpu-workers", pool="default_pool")
    doc = op.job_document(ElasticoHook().get_settings().default_queue)
    assert doc.get("queue") == expected and op.queue == "gpu-workers" and op.pool == "default_pool"


def test_status_page_shows_the_queues(elastico_env: Env, tmp_path: Path, profiles_copy: Path) -> None:
    """The status page's data and HTML carry a queue view: each queue's use against its nominal quota, what it
    borrows and lends, its fair share; a queued job's team queue beside it."""
    import json

    from elastico_airflow.status.data import status_snapshot
    from elastico_airflow.status.render import render_page
    from elastico_core.state import JobService

    cluster = tmp_path / "teams.yaml"
    cluster.write_text(TEAMS)
    svc = JobService.open(elastico_env.state_url)
    try:
        run_epochs(elastico_env.state_url, cluster, profiles_copy)
        svc.submit_document("jobs:\n" + "".join(
            f"  - {{id: a{i}, workload: bert, floor: 50, queue: team-a, knobs: {{micro_batch: [128]}}}}\n" for i in range(6)))
        run_epochs(elastico_env.state_url, cluster, profiles_copy)
        data = status_snapshot(svc, backend="sqlite")
    finally:
        svc.close()
    queues = {q["name"]: q for q in data["queues"]}
    assert set(queues) == {"team-a", "team-b"} and queues["team-a"]["borrowed_gpus"] > 0 and queues["team-b"]["lent_gpus"] > 0
    assert data["queue"] and all(row["queue"] == "team-a" for row in data["queue"])
    html = render_page(data)
    assert "Teams' queues" in html and 'data-queue="team-a"' in html and "queue team-a" in html
    json.dumps(data)  # the JSON endpoint serves it as is
