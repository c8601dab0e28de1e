"""Races between separate processes: registrations, controllers (one leased, two split-brained), a launcher.

50 jobs are registered from 5 processes (each identity by two of them at once) while three controllers
admit and a launcher starts, finishes and cancels jobs, all against the same database. Throughout (a
monitor samples the ledger) and afterwards: no GPU's memory or job slots are over-booked, no job is admitted
twice or started twice, no registration is lost or duplicated.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from state_helpers import check_ledger, make_cluster

from elastico_core.rst.store import ProfileStore
from elastico_core.state import (
    DecisionKind,
    ExternalIdentity,
    JobService,
    JobStatus,
    StateConflict,
    StateStore,
    upgrade_state,
)
from elastico_core.state.controller import Controller, ControllerConfig
from elastico_core.state.db import make_engine
from elastico_core.state.models import Controller as LeaseRow
from elastico_core.state.models import Event

N_JOBS = 50
REGISTRARS = 5
RACE_S = 6.0
WORKLOADS = ("ncf", "lstm", "dcgan", "qwen-1.7b", "resnet50")


def job_doc(i: int) -> dict[str, Any]:
    return {"workload": WORKLOADS[i % len(WORKLOADS)], "floor": 1, "weight": 1 + i % 3}


def identity(i: int) -> ExternalIdentity:
    return ExternalIdentity.airflow("race", "run-1", f"task-{i}")


def _guard(fn: Any, errors: Any, *args: Any) -> None:
    try:
        fn(*args)
    except BaseException:
        errors.put(traceback.format_exc())


def registrar(url: str, k: int) -> None:
    service = JobService.open(url, upgrade=False)
    mine = [i for i in range(N_JOBS) if i % REGISTRARS == k or (i + 1) % REGISTRARS == k]
    random.Random(k).shuffle(mine)
    for i in mine:
        result = service.register(job_doc(i), identity(i), try_number=1)
        assert result.job.id == identity(i).derived_job_id()
    service.close()


def controller(url: str, profiles: str, name: str, seconds: float) -> None:
    store = StateStore.open(url, upgrade=False)
    config = ControllerConfig(interval_s=0.02, name=name, feedback_interval_s=3600, lease_ttl_s=5)
    ctl = Controller(store, make_cluster(nodes=2, gpus=2), ProfileStore.open(profiles), config=config)
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    ctl.run(stop=stop)
    store.close()


def launcher(url: str, seconds: float) -> None:
    service = JobService.open(url, upgrade=False)
    rng = random.Random(7)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for job in service.list_jobs([JobStatus.ADMITTED, JobStatus.RUNNING, JobStatus.SWITCHING]):
            try:
                if job.status is JobStatus.ADMITTED:
                    service.report_started(job.id, job.token)  # type: ignore[arg-type]
                elif job.status is JobStatus.SWITCHING:
                    service.acknowledge(job.id, job.token)  # type: ignore[arg-type]
                elif rng.random() < 0.3:
                    service.report_finished(job.id, job.plan.token, 100.0)  # type: ignore[union-attr]
                elif rng.random() < 0.05:
                    service.cancel(job.id, "race")
            except StateConflict:
                pass  # the controller moved first: read again next round
        time.sleep(0.03)
    service.close()


def monitor(url: str, seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        check_ledger(url)  # raises on any over-booked GPU or inconsistent allocation
        time.sleep(0.2)


def test_racing_registrations_and_admissions(state_url: str, profiles_dir: Path) -> None:
    upgrade_state(state_url)
    engine = make_engine(state_url)
    with engine.begin() as conn:  # two more lease rows: controllers that each believe they lead
        conn.execute(sa.insert(LeaseRow), [{"name": n, "fence": 0, "expires_unix": 0.0, "epoch": 0} for n in ("rogue-1", "rogue-2")])
    engine.dispose()

    # Not fork: a pytest process that already ran polars (its thread pool) forks children that can deadlock.
    # A fork server imports the heavy modules once, runs nothing, and forks the workers from that clean state.
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["elastico_core.state.controller", "elastico_core.state.service", "state_helpers"])
    errors = ctx.Queue()
    procs = [ctx.Process(target=_guard, args=(registrar, errors, state_url, k)) for k in range(REGISTRARS)]
    procs += [ctx.Process(target=_guard, args=(controller, errors, state_url, str(profiles_dir), name, RACE_S))
              for name in ("default", "rogue-1", "rogue-2")]
    procs.append(ctx.Process(target=_guard, args=(launcher, errors, state_url, RACE_S)))
    procs.append(ctx.Process(target=_guard, args=(monitor, errors, state_url, RACE_S)))
    for p in procs:
        p.start()
    deadline = time.monotonic() + 150
    for p in procs:
        p.join(max(1.0, deadline - time.monotonic()))
    hung = [p for p in procs if p.is_alive()]
    for p in hung:
        p.kill()
    assert not hung, f"{len(hung)} processes did not finish"
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, failures[0]
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]

    service = JobService.open(state_url)
    try:
        jobs = service.list_jobs()
        assert len(jobs) == N_JOBS, "every registration kept exactly once"
        assert {j.id for j in jobs} == {identity(i).derived_job_id() for i in range(N_JOBS)}
        # a job outbid (checkpointed for waiting ones, ``preempt_outbid``) is admitted again once per outbid
        outbid = Counter(d.job_id for d in service.decisions(limit=100_000) if d.kind is DecisionKind.PREEMPT and d.code == "outbid")
        assert all(j.attempts <= 1 + outbid[j.id] for j in jobs), "no job admitted twice for one placement"
        assert sum(j.attempts for j in jobs) > 0, "the race admitted something"
        summary = check_ledger(state_url)
        assert summary["gpus"] == 4
        engine = make_engine(state_url)
        with engine.connect() as conn:
            starts = conn.execute(
                sa.select(Event.token, sa.func.count()).where(Event.kind == "started").group_by(Event.token)
            ).all()
        engine.dispose()
        assert all(n == 1 for _, n in starts), "no plan started twice"
    finally:
        service.close()


@pytest.mark.postgres
def test_two_transactions_cannot_overbook_one_gpu(pg_url: str) -> None:
    """The database itself refuses an over-booked GPU row (CHECK constraint), whatever code tries."""
    upgrade_state(pg_url)
    engine = make_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO elastico_gpus (id, node, idx, model, signature, memory_mib, capacity_mib, max_jobs,"
                " used_mem_mib, jobs, present) VALUES ('n/0', 'n', 0, 'a100-40gb', 's', 40960, 40448, 2, 0, 0, true)"
            )
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.exec_driver_sql("UPDATE elastico_gpus SET used_mem_mib = 40449, jobs = 1 WHERE id = 'n/0'")
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.exec_driver_sql("UPDATE elastico_gpus SET used_mem_mib = 1, jobs = 3 WHERE id = 'n/0'")
    finally:
        engine.dispose()
