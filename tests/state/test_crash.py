"""The controller killed with SIGKILL mid-epoch and restarted: no job lost, none admitted twice, ledger intact.

The kill comes from the CLI's test hook (``ELASTICO_CONTROLLER_FAULT=<stage>``) inside a real
``elastico controller run --once`` subprocess: after planning (decided, nothing written), inside the
recording transaction (rows written, not committed), and right after the commit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from state_helpers import check_ledger, cluster_yaml

from elastico_core.rst.store import ProfileStore
from elastico_core.state import DecisionKind, JobService, JobStatus, StateStore
from elastico_core.state.clusters import stored_cluster
from elastico_core.state.controller import Controller, ControllerConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CLI = [sys.executable, "-c", "import sys; from elastico_core.cli import main; main(sys.argv[1:])"]


def controller_once(tmp: Path, url: str, profiles: Path, fault: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTICO_")}
    if fault:
        env["ELASTICO_CONTROLLER_FAULT"] = fault
    cluster = tmp / "cluster.yaml"
    cluster.write_text(cluster_yaml(nodes=2, gpus=4))
    args = ["controller", "run", "--once", "--cluster", str(cluster), "--state", url, "--profiles", str(profiles)]
    return subprocess.run([*CLI, *args], cwd=tmp, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("stage", ["planned", "recording", "recorded"])
def test_sigkill_mid_epoch_then_restart(stage: str, state_url: str, tmp_path: Path, profiles_dir: Path) -> None:
    service = JobService.open(state_url)
    try:
        service.submit_document((EXAMPLES / "jobs.yaml").read_text(), "jobs.yaml")
        ids = {j.id for j in service.list_jobs()}

        crashed = controller_once(tmp_path, state_url, profiles_dir, stage)
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
        assert {j.id for j in service.list_jobs()} == ids, "no job lost"
        check_ledger(state_url)
        if stage == "recorded":
            admitted = {j.id: j.token for j in service.list_jobs([JobStatus.ADMITTED])}
            assert admitted, "the committed epoch survived the kill"
            first = sorted(admitted)[0]
            service.report_started(first, admitted[first])  # a launcher started one of them
        else:
            assert service.decisions() == () and service.prices() == (), "nothing of the killed epoch was kept"
            assert all(j.status is JobStatus.PENDING for j in service.list_jobs())
            assert all(g.used_mem_mib == 0 for g in service.gpus())
            admitted = {}

        # the restart runs in this process (a subprocess costs seconds of imports): the cluster is the one the
        # killed controller recorded, and its lease is taken over at once because its process is gone
        store = StateStore.open(state_url)
        found = stored_cluster(store)
        assert found is not None
        restarted = Controller(store, found[0], ProfileStore.open(profiles_dir), config=ControllerConfig(interval_s=0))
        assert restarted.run_epoch().skipped is None
        restarted.run_epoch()  # and once more: a steady state
        restarted.close()
        store.close()

        jobs = {j.id: j for j in service.list_jobs()}
        assert set(jobs) == ids
        for job_id, token in admitted.items():  # (a later switch request may add a target; the plan stays)
            assert jobs[job_id].plan.token == token, "an admission committed before the kill is not redone"  # type: ignore[union-attr]
        admits: dict[str, int] = {}
        for d in service.decisions(limit=1000):
            if d.kind is DecisionKind.ADMIT:
                admits[d.job_id] = admits.get(d.job_id, 0) + 1
        assert all(n == 1 for n in admits.values()), admits
        assert all(j.attempts <= 1 for j in jobs.values())
        assert sum(j.status.holds_gpus for j in jobs.values()) == len(admits) > 0
        check_ledger(state_url)
    finally:
        service.close()
