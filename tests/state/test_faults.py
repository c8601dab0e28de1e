"""OOM narrowing as a pure rule, and the reattach path of an Airflow task retried after its worker died."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from state_helpers import check_ledger, make_cluster

from elastico_core.model.knobs import Knobs, cartesian
from elastico_core.rst.store import ProfileStore
from elastico_core.state import ExternalIdentity, JobService, JobStatus, StateStore
from elastico_core.state.controller import Controller, ControllerConfig
from elastico_core.state.faults import lower_memory_limits, merge_limits
from elastico_core.state.specs import apply_limits, job_document

SPEC = job_document({"id": "j", "workload": "bert"}).spec  # micro_batch 32..128, checkpointing, amp, dp 1


def toy_memory(k: Knobs) -> float:
    """Monotone per knob: activations grow with the micro-batch, shrink with checkpointing and AMP."""
    act = float(k["micro_batch"]) * 100 * (0.45 if k["checkpointing"] else 1.0) * (0.55 if k["amp"] else 1.0)
    return 10_000 + act


@pytest.mark.parametrize(
    "failed",
    [
        {"micro_batch": 128, "checkpointing": False, "amp": False, "dp": 1},
        {"micro_batch": 64, "checkpointing": True, "amp": False, "dp": 1},
        {"micro_batch": 32, "checkpointing": False, "amp": True, "dp": 1},
    ],
    ids=["largest", "middle", "small"],
)
def test_the_box_below_needs_less_memory(failed: dict) -> None:
    f = Knobs.of(failed)
    limits = lower_memory_limits(SPEC, f, toy_memory(f), toy_memory)
    assert limits
    narrowed = apply_limits(SPEC, limits)
    space = list(cartesian(narrowed.knob_space))
    assert f not in space and space
    assert all(toy_memory(k) < toy_memory(f) for k in space)


def test_nothing_lower_means_none() -> None:
    smallest = Knobs.of({"micro_batch": 32, "checkpointing": True, "amp": True, "dp": 1})
    assert lower_memory_limits(SPEC, smallest, toy_memory(smallest), toy_memory) is None
    cannot_run = Knobs.of({"micro_batch": 64, "checkpointing": True, "amp": True, "dp": 1})
    assert lower_memory_limits(SPEC, cannot_run, math.inf, lambda k: None) is None


def test_limits_only_shrink() -> None:
    merged = merge_limits({"micro_batch": [32, 64], "amp": [True]}, {"micro_batch": [32], "checkpointing": [True]})
    assert merged == {"micro_batch": [32], "amp": [True], "checkpointing": [True]}


def test_retried_task_reattaches(state_url: str, profiles_dir: Path) -> None:
    service = JobService.open(state_url)
    ident = ExternalIdentity.airflow("labeling", "scheduled__2026-12-01", "label", map_index=3)
    first = service.register({"workload": "qwen-1.7b", "floor": 50}, ident, try_number=1)
    ctl = Controller(StateStore.open(state_url), make_cluster(1, 1), ProfileStore.open(profiles_dir),
                     config=ControllerConfig(interval_s=0))
    ctl.run_epoch()
    token = service.get(first.job.id).token
    assert token is not None
    service.report_started(first.job.id, token)
    # the worker dies; Airflow retries the task, which registers again and finds its job running
    retry = service.register({"workload": "qwen-1.7b", "floor": 50}, ident, try_number=2)
    assert not retry.created and retry.job.status is JobStatus.RUNNING and retry.job.token == token
    assert service.report_started(retry.job.id, token).status is JobStatus.RUNNING  # reattach, no relaunch
    ctl.run_epoch()
    assert service.get(first.job.id).attempts == 1
    check_ledger(state_url)
    ctl.close()
    service.close()


def test_importing_the_facade_stays_cheap() -> None:
    """An Airflow trigger imports ``elastico_core.state``: no planner, numpy or Airflow behind it."""
    code = ("import sys, elastico_core.state; bad = [m for m in ('numpy', 'polars', 'airflow', 'elastico_core.pds.planner')"
            " if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
