"""Queues against the real state: team B's lent quota comes back through the controller, submit refuses what
a queue can never admit, and the queue commands read what the controller recorded."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from state_helpers import check_ledger, launch_admitted

from elastico_core.model.errors import SpecError
from elastico_core.rst.store import ProfileStore
from elastico_core.specs import parse_cluster
from elastico_core.state import DecisionKind, JobService, JobStatus, StateStore
from elastico_core.state.controller import Controller, ControllerConfig
from tests.cli_runner import run_cli as run

FAST = ControllerConfig(interval_s=0, feedback_interval_s=0, lease_ttl_s=30)
TEAMS = """cluster:
  name: teams
  nodes:
    - {name: node, gpu: a100-40gb, gpus: 4, cpu_cores: 64, host_mem_gib: 512}
  reclaim_epochs: 2
  queues:
    - {name: team-a, cohort: org, nominal_quota: {gpus: 2}}
    - {name: team-b, cohort: org, nominal_quota: {gpus: 2}, borrowing_limit: {gpus: 0}}
"""
A_JOBS = "jobs:\n" + "".join(f"  - {{id: a{i}, workload: resnet50, floor: 100, queue: team-a}}\n" for i in range(6))
B_JOBS = "jobs:\n" + "".join(f"  - {{id: b{i}, workload: bert, floor: 50, queue: team-b}}\n" for i in range(3))


def _controller(url: str, profiles: Path) -> Controller:
    return Controller(StateStore.open(url), parse_cluster(TEAMS, "teams.yaml"), ProfileStore.open(profiles), config=FAST,
                      cluster_yaml=TEAMS)


@pytest.mark.parametrize("restart", [False, True], ids=["one-controller", "restarted-every-epoch"])
def test_lent_quota_comes_back_within_the_deadline(
    service: JobService, state_url: str, profiles_dir: Path, restart: bool
) -> None:
    """Team B's quota is lent to team A's running jobs; B submits; B is admitted within reclaim_epochs;
    A's jobs are reshaped or requeued (checkpointed, the reason says by whom), and none is lost. The same
    when the controller is started again every epoch (``--once`` from cron): the owed epochs are recorded."""
    ctl = _controller(state_url, profiles_dir)
    service.submit_document(A_JOBS)
    ctl.run_epoch()
    launch_admitted(service)
    a_held = {s.name: s for s in service.queues()}["team-a"]
    assert a_held.used_gpus > 2.0 and {s.name: s for s in service.queues()}["team-b"].lent_gpus > 0  # B's quota, lent
    assert all(j.status is JobStatus.RUNNING for j in service.list_jobs())
    service.submit_document(B_JOBS)
    admitted_in = None
    for epoch in range(1, 3 + 1):
        if restart:
            ctl.close()
            ctl = _controller(state_url, profiles_dir)
        ctl.run_epoch()
        launch_admitted(service)
        jobs = {j.id: j for j in service.list_jobs()}
        assert set(jobs) == {f"a{i}" for i in range(6)} | {f"b{i}" for i in range(3)}  # none lost
        if admitted_in is None and all(jobs[f"b{i}"].status.holds_gpus for i in range(3)):
            admitted_in = epoch
    assert admitted_in is not None and admitted_in <= 2 + 1  # reclaim_epochs, and one for a deferred admission
    queues = {s.name: s for s in service.queues()}
    assert queues["team-a"].used_gpus <= 2.0 + 1e-6 and queues["team-b"].used_gpus <= 2.0 + 1e-6
    decisions = service.decisions(limit=500)
    reclaimed = [d for d in decisions if d.kind is DecisionKind.PREEMPT]
    switched = [d for d in decisions if d.kind is DecisionKind.SWITCH]
    assert reclaimed or switched  # A's jobs gave the quota back by requeue or by reshape
    for d in reclaimed:
        assert d.code == "reclaimed" and "reclaimed by queue team-b" in d.reason and d.job_id.startswith("a")
        job = service.get(d.job_id)
        assert job.status in (JobStatus.PENDING, JobStatus.ADMITTED, JobStatus.RUNNING)  # waits again, or back
    for job in service.list_jobs([JobStatus.PENDING]):
        assert job.queue == "team-a" and job.queue_code in ("reclaimed", "quota")
    ctl.close()
    check_ledger(state_url)


def test_submit_refuses_what_a_queue_can_never_admit(service: JobService, state_url: str, profiles_dir: Path) -> None:
    _controller(state_url, profiles_dir).run_epoch()  # the controller records the cluster it plans against
    with pytest.raises(SpecError, match=re.escape("queue 'team-x' is not a queue of cluster 'teams' (queues: team-a, team-b)")):
        service.submit_document(A_JOBS + "  - {id: x1, workload: lstm, floor: 10, queue: team-x}\n", "jobs.yaml")
    with pytest.raises(SpecError, match=r"queue team-b: its smallest configuration is charged .* more than the queue's "
                                        r"nominal quota 2 plus borrowing limit 0 GPUs"):
        service.submit_document("jobs:\n  - {id: big, workload: bert, floor: 50, queue: team-b, gpus: 4, knobs: {dp: [4]}}\n")
    assert service.list_jobs() == ()  # all or nothing


def test_queue_commands(state_url: str, tmp_path: Path, profiles_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = tmp_path / "teams.yaml"
    cluster.write_text(TEAMS)
    jobs = tmp_path / "a.yaml"
    jobs.write_text(A_JOBS)
    plain = tmp_path / "plain.yaml"  # the same cluster before its teams' queues were declared
    plain.write_text(TEAMS.split("  reclaim_epochs")[0])
    assert run(capsys, "controller", "run", "--once", "--cluster", str(plain), "--state", state_url,
               "--profiles", str(profiles_dir), "--predictor", "table")[0] == 0
    code, out, _ = run(capsys, "queues", "list", "--state", state_url)  # a state whose cluster has no queues
    assert code == 0 and "no queues" in out
    assert run(capsys, "controller", "run", "--once", "--cluster", str(cluster), "--state", state_url,
               "--profiles", str(profiles_dir), "--predictor", "table")[0] == 0
    assert run(capsys, "jobs", "submit", "--spec", str(jobs), "--state", state_url)[0] == 0
    assert run(capsys, "controller", "run", "--once", "--state", state_url, "--profiles", str(profiles_dir), "--predictor", "table")[0] == 0
    code, out, _ = run(capsys, "queues", "list", "--state", state_url, "--json")
    listed = {q["name"]: q for q in json.loads(out)}
    assert code == 0 and set(listed) == {"team-a", "team-b"}
    assert listed["team-a"]["borrowed_gpus"] > 0 and listed["team-b"]["lent_gpus"] > 0 and listed["team-b"]["borrowing_limit_gpus"] == 0
    code, out, _ = run(capsys, "queues", "list", "--state", state_url)
    assert code == 0 and "team-a" in out and "fair share" in out
    code, out, _ = run(capsys, "queues", "show", "team-a", "--state", state_url)
    assert code == 0 and "nominal quota" in out and "a0" in out
    code, _, err = run(capsys, "queues", "show", "team-z", "--state", state_url)
    assert code == 2 and "no queue 'team-z' (queues: team-a, team-b)" in err and err.count("\n") == 1
    code, out, _ = run(capsys, "jobs", "list", "--state", state_url, "--wide")
    assert code == 0 and "team-a" in out  # the queue column, once teams' queues are in use
    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs:\n  - {id: y1, workload: lstm, floor: 10, queue: team-y}\n")
    code, _, err = run(capsys, "jobs", "submit", "--spec", str(bad), "--state", state_url)
    assert code == 2 and err.count("\n") == 1 and "job 'y1': queue: queue 'team-y' is not a queue" in err

