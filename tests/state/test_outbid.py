"""Outbid preemption through the real state: under production's ``preempt_outbid`` the controller checkpoints a
long running job for a much shorter one that waits (code ``outbid``), the long job waits and comes back when the
short one ends; none is lost and the ledger holds. With the rule off (``no-preempt``) it is never stopped."""

from __future__ import annotations

from pathlib import Path

import pytest
from state_helpers import check_ledger, launch_admitted

from elastico_core.pds.rules import PRODUCTION, VARIANTS
from elastico_core.rst.store import ProfileStore
from elastico_core.specs import parse_cluster
from elastico_core.state import DecisionKind, JobService, JobStatus, StateStore
from elastico_core.state.controller import Controller, ControllerConfig

FAST = ControllerConfig(interval_s=0, feedback_interval_s=0, lease_ttl_s=30)
ONE_GPU = """cluster:
  name: one
  nodes:
    - {name: node, gpu: a100-40gb, gpus: 1, cpu_cores: 64, host_mem_gib: 512}
"""
# a Transformer at its largest micro-batch without checkpointing or AMP (38 GiB): two never share the GPU
RIGID = "knobs: {micro_batch: [512], checkpointing: [false], amp: [false]}"
LONG = f"jobs:\n  - {{id: long, workload: transformer, floor: 1, work: 1.0e12, {RIGID}}}\n"
SHORT = f"jobs:\n  - {{id: short, workload: transformer, floor: 1, work: 1000, {RIGID}}}\n"


@pytest.mark.parametrize("outbid", [True, False], ids=["rule-on", "rule-off"])
def test_a_long_job_is_checkpointed_for_a_short_one_and_comes_back(
    service: JobService, state_url: str, profiles_dir: Path, outbid: bool
) -> None:
    ctl = Controller(StateStore.open(state_url), parse_cluster(ONE_GPU, "one.yaml"), ProfileStore.open(profiles_dir),
                     config=FAST, rules=PRODUCTION if outbid else VARIANTS["no-preempt"])
    service.submit_document(LONG)
    ctl.run_epoch()
    launch_admitted(service)
    assert service.get("long").status is JobStatus.RUNNING
    service.submit_document(SHORT)
    ctl.run_epoch()
    launch_admitted(service)
    long, short = service.get("long"), service.get("short")
    if not outbid:
        assert long.status is JobStatus.RUNNING and short.status is JobStatus.PENDING
        assert not [d for d in service.decisions(limit=100) if d.kind is DecisionKind.PREEMPT]
        ctl.close()
        check_ledger(state_url)
        return
    (stop,) = [d for d in service.decisions(limit=100) if d.kind is DecisionKind.PREEMPT]
    assert stop.job_id == "long" and stop.code == "outbid" and stop.reason.startswith("outbid: checkpointed for shorter jobs")
    assert long.status is JobStatus.PENDING and long.queue_code == "outbid"
    assert short.status.holds_gpus
    check_ledger(state_url)
    service.report_finished("short", short.plan.token if short.plan else "")
    ctl.run_epoch()
    launch_admitted(service)
    assert service.get("long").status is JobStatus.RUNNING  # back from its checkpoint
    assert {j.id for j in service.list_jobs()} == {"long", "short"}  # none lost
    ctl.close()
    check_ledger(state_url)
