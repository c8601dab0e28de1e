"""The controller against real state: admission, the launcher reports, switches, preemption, OOM, feedback."""

from __future__ import annotations

import logging
from pathlib import Path

import polars as pl
import pytest
import sqlalchemy as sa
from state_helpers import check_ledger, make_cluster

from elastico_core.iac.cf import CFRegressor
from elastico_core.iac.dataset import validate
from elastico_core.iac.evaluate import fit_model
from elastico_core.iac.learned import LearnedPredictor
from elastico_core.model.hardware import gpu_model
from elastico_core.model.job import JobSpec
from elastico_core.model.knobs import Knobs
from elastico_core.pds.rules import variant
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.store import ProfileStore
from elastico_core.state import DecisionKind, JobService, JobStatus, StateConflict, StateStore
from elastico_core.state.controller import Controller, ControllerConfig
from elastico_core.state.db import make_engine
from elastico_core.state.models import Epoch, Job
from elastico_core.state.recorder import Stage

REPO = Path(__file__).resolve().parents[2]
FAST = ControllerConfig(interval_s=0, feedback_interval_s=0, lease_ttl_s=30)


def controller(url: str, profiles: Path, *, gpus: int = 2, nodes: int = 1, config: ControllerConfig = FAST, **kw: object) -> Controller:
    return Controller(StateStore.open(url), make_cluster(nodes, gpus), ProfileStore.open(profiles), config=config, **kw)  # type: ignore[arg-type]


def set_plan_knobs(url: str, job_id: str, knobs: dict) -> None:
    """Test-only surgery: pretend the job runs another configuration (ledger memory unchanged)."""
    engine = make_engine(url)
    with engine.begin() as conn:
        plan = dict(conn.execute(sa.select(Job.plan).where(Job.id == job_id)).scalar_one())
        plan["knobs"] = knobs
        conn.execute(sa.update(Job).where(Job.id == job_id).values(plan=plan, version=Job.version + 1))
    engine.dispose()


def test_an_epoch_admits_and_records(service: JobService, state_url: str, profiles_dir: Path) -> None:
    service.submit_document("jobs:\n  - {id: bert-1, workload: bert, floor: 100}\n  - {id: lstm-1, workload: lstm, floor: 100}\n")
    ctl = controller(state_url, profiles_dir)
    report = ctl.run_epoch()
    assert report.recorded and report.epoch == 1 and report.counts["admitted"] == 2
    jobs = {j.id: j for j in service.list_jobs()}
    for job in jobs.values():
        assert job.status is JobStatus.ADMITTED and job.attempts == 1
        assert job.plan is not None and job.plan.token == f"{job.id}:1" and job.plan.epoch == 1
        env = job.plan.launch.env_dict()
        assert env["ELASTICO_JOB_ID"] == job.id and Knobs.from_json(env["ELASTICO_KNOBS"]) == job.plan.knobs
        assert job.plan.nodes == ("node",) and job.plan.memory_mib > 0
    decisions = service.decisions()
    assert sorted(d.kind for d in decisions) == [DecisionKind.ADMIT, DecisionKind.ADMIT]
    assert all(d.token and d.reason.startswith("admitted on") for d in decisions)
    assert service.prices()[-1].epoch == 1
    check_ledger(state_url)
    again = ctl.run_epoch()  # nothing changed: no new epoch, no second admission
    assert not again.recorded and again.epoch == 1
    assert len(service.decisions()) == 2
    ctl.close()


def test_launcher_lifecycle_and_feedback(service: JobService, state_url: str, profiles_dir: Path) -> None:
    service.register({"id": "bert-1", "workload": "bert", "floor": 100})
    ctl = controller(state_url, profiles_dir)
    ctl.run_epoch()
    job = service.get("bert-1")
    assert job.plan is not None
    token = job.plan.token
    assert service.report_started("bert-1", token).status is JobStatus.RUNNING
    assert service.report_started("bert-1", token).version == service.get("bert-1").version  # reattach: no-op
    service.report_throughput("bert-1", token, 321.0)
    done = service.report_finished("bert-1", token, 333.0)
    assert done.status is JobStatus.FINISHED and done.measured_throughput == 333.0
    assert service.report_finished("bert-1", token, 333.0).version == done.version  # repeated: no-op
    with pytest.raises(StateConflict):
        service.report_started("bert-1", token)
    check_ledger(state_url)
    assert all(g.used_mem_mib == 0 for g in service.gpus())
    ctl.run_epoch()  # feeds the isolated run's throughput into the profile store
    fed = (pl.col("workload") == "bert") & (pl.col("source") == "measured") & (pl.col("gpu") != "h200-141gb")
    measured = ProfileStore.open(profiles_dir).frame().filter(fed)
    assert measured.height == 1 and measured["throughput"][0] == 333.0
    assert Knobs.from_json(measured["knobs"][0]) == job.plan.knobs
    assert all(m.fed for m in service.measurements(job_id="bert-1"))
    ctl.close()


def test_switch_request_and_acknowledge(service: JobService, state_url: str, profiles_dir: Path) -> None:
    service.register({"id": "bert-1", "workload": "bert", "floor": 100})
    ctl = controller(state_url, profiles_dir, gpus=1)
    ctl.run_epoch()
    token = service.get("bert-1").token
    assert token is not None
    service.report_started("bert-1", token)
    poor = {"micro_batch": 32, "checkpointing": True, "amp": False, "dp": 1}
    set_plan_knobs(state_url, "bert-1", poor)
    report = ctl.run_epoch()
    assert report.counts["switched"] == 1
    job = service.get("bert-1")
    assert job.status is JobStatus.SWITCHING and job.pending_action is DecisionKind.SWITCH
    assert job.target is not None and job.target.token == "bert-1:2" and job.token == "bert-1:2"
    assert job.plan is not None and job.plan.knobs == Knobs.of(poor)
    check_ledger(state_url)
    with pytest.raises(StateConflict):
        service.acknowledge("bert-1", "bert-1:1")
    acked = service.acknowledge("bert-1", "bert-1:2")
    assert acked.status is JobStatus.RUNNING and acked.plan == job.target and acked.target is None
    assert service.acknowledge("bert-1", "bert-1:2").version == acked.version
    check_ledger(state_url)
    assert not ctl.run_epoch().counts.get("switched")
    ctl.close()


def test_lost_gpus_preempt(service: JobService, state_url: str, profiles_dir: Path) -> None:
    service.register({"id": "bert-1", "workload": "bert", "floor": 100})
    big = controller(state_url, profiles_dir, gpus=1, nodes=2)
    big.run_epoch()
    big.close()
    node = service.get("bert-1").plan.nodes[0]  # type: ignore[union-attr]
    from elastico_core.specs import parse_cluster

    other = "node-1" if node == "node-0" else "node-0"
    small = parse_cluster(f"cluster:\n  name: test\n  nodes:\n    - {{name: {other}, gpu: a100-40gb, gpus: 1}}\n", "c")
    ctl = Controller(StateStore.open(state_url), small, ProfileStore.open(profiles_dir), config=FAST)
    report = ctl.run_epoch()
    assert report.counts["preempted"] == 1
    kinds = [d.kind for d in service.decisions(job_id="bert-1")]
    assert DecisionKind.PREEMPT in kinds
    gone = {g.id: g for g in service.gpus()}[f"{node}/0"]
    assert not gone.present and gone.used_mem_mib == 0
    check_ledger(state_url)
    ctl.run_epoch()  # re-admitted on the GPU that is left
    job = service.get("bert-1")
    assert job.status is JobStatus.ADMITTED and job.attempts == 2 and job.plan.gpus == (f"{other}/0",)  # type: ignore[union-attr]
    check_ledger(state_url)
    ctl.close()


def test_oom_narrows_corrects_and_gives_up(service: JobService, state_url: str, profiles_dir: Path) -> None:
    service.register({"id": "bert-1", "workload": "bert", "floor": 1})
    ctl = controller(state_url, profiles_dir, gpus=1, config=ControllerConfig(interval_s=0, feedback_interval_s=0))
    ctl.run_epoch()
    seen: list[tuple[Knobs, float]] = []
    for _kill in range(3):
        job = service.get("bert-1")
        assert job.status is JobStatus.ADMITTED and job.plan is not None
        seen.append((job.plan.knobs, job.plan.memory_mib))
        service.report_started("bert-1", job.plan.token)
        after = service.report_oom("bert-1", job.plan.token, observed_mem_mib=job.plan.memory_mib * 1.3)
        assert after.status is JobStatus.PENDING and after.oom_kills == _kill + 1
        check_ledger(state_url)
        ctl.run_epoch()
    knobs = [k for k, _ in seen]
    assert len(set(knobs)) == 3, "never the same configuration twice"
    shipped = ProfileStore.open(REPO / "profiles")  # one yardstick for all three: the uncorrected estimates
    bert, a100 = PAPER_WORKLOADS["bert"], gpu_model("a100-40gb")
    estimated = [shipped.lookup(bert, k, a100).resources.gpu_mem_mib for k in knobs]  # type: ignore[union-attr]
    assert estimated == sorted(estimated, reverse=True) and len(set(estimated)) == 3, "each retry needs less memory"
    job = service.get("bert-1")
    assert job.status is JobStatus.FAILED and "giving up" in job.reason and job.oom_kills == 3
    kinds = [d.kind for d in reversed(service.decisions(job_id="bert-1"))]
    assert kinds.count(DecisionKind.NARROW) == 2 and kinds[-1] is DecisionKind.FAIL
    assert job.knob_limits  # the narrowed space is stored with the job
    store = ProfileStore.open(profiles_dir).frame()
    first = store.filter((pl.col("workload") == "bert") & (pl.col("knobs") == knobs[0].to_json()) & (pl.col("gpu") == "a100-40gb"))
    assert first["source"].to_list() == ["measured"] and first["gpu_mem_mib"][0] == pytest.approx(seen[0][1] * 1.3)
    check_ledger(state_url)
    ctl.close()


def test_corrupt_profile_file_is_named_in_the_log(
    service: JobService, state_url: str, profiles_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (profiles_dir / "broken_1_any_any.parquet").write_bytes(b"this is not parquet")
    service.register({"id": "bert-1", "workload": "bert", "floor": 100})
    ctl = controller(state_url, profiles_dir)
    with caplog.at_level(logging.WARNING, logger="elastico.controller"):
        report = ctl.run_epoch()
    assert report.counts["admitted"] == 1  # the estimator filled in
    assert any("broken_1_any_any.parquet" in r.getMessage() and "estimator" in r.getMessage() for r in caplog.records)
    ctl.close()


def test_unplannable_spec_fails_only_that_job(service: JobService, state_url: str, profiles_dir: Path) -> None:
    service.submit_document("jobs:\n  - {id: good, workload: bert, floor: 100}\n  - {id: bad, workload: lstm, floor: 100}\n")
    engine = make_engine(state_url)
    with engine.begin() as conn:  # a spec the current catalog no longer knows (e.g. after an upgrade)
        conn.execute(sa.update(Job).where(Job.id == "bad").values(spec={"jobs": [{"id": "bad", "workload": "gone"}]}))
    engine.dispose()
    ctl = controller(state_url, profiles_dir)
    ctl.run_epoch()
    assert service.get("good").status is JobStatus.ADMITTED
    bad = service.get("bad")
    assert bad.status is JobStatus.FAILED and "cannot be planned" in bad.reason
    ctl.close()


def test_planning_window_bounds_the_queue(service: JobService, state_url: str, profiles_dir: Path) -> None:
    service.register_many([{"id": f"j{i}", "workload": "ncf", "floor": 1, "priority": 1 if i == 4 else 0} for i in range(5)])
    ctl = controller(state_url, profiles_dir, gpus=8, config=ControllerConfig(interval_s=0, max_pending=2))
    report = ctl.run_epoch()
    assert report.planned == 2 and report.pending_total == 5
    admitted = {j.id for j in service.list_jobs([JobStatus.ADMITTED])}
    assert admitted == {"j4", "j0"}  # priority first, then registration order
    ctl.close()


def test_changes_during_planning_are_not_overwritten(service: JobService, state_url: str, profiles_dir: Path) -> None:
    service.submit_document("jobs:\n  - {id: a, workload: bert, floor: 100}\n  - {id: b, workload: lstm, floor: 100}\n")

    def cancel_a(stage: Stage) -> None:
        if stage is Stage.PLANNED:
            service.cancel("a", "changed my mind")

    ctl = controller(state_url, profiles_dir, hook=cancel_a)
    report = ctl.run_epoch()
    assert report.counts["admitted"] == 1
    assert service.get("a").status is JobStatus.CANCELLED and service.get("b").status is JobStatus.ADMITTED
    check_ledger(state_url)
    ctl.close()


def test_one_lease_one_recorder(service: JobService, state_url: str, profiles_dir: Path) -> None:
    service.register({"id": "bert-1", "workload": "bert", "floor": 100})
    short = ControllerConfig(interval_s=0, lease_ttl_s=0.3)
    first, second = controller(state_url, profiles_dir, config=short), controller(state_url, profiles_dir, config=short)
    assert first.run_epoch().recorded
    skipped = second.run_epoch()
    assert skipped.skipped and first.holder in skipped.skipped

    def stall(stage: Stage) -> None:  # first stalls past its TTL; second takes over meanwhile
        if stage is Stage.PLANNED:
            import time

            time.sleep(0.5)
            service.register({"id": "lstm-1", "workload": "lstm", "floor": 100})
            assert second.run_epoch().recorded

    service.register({"id": "ncf-1", "workload": "ncf", "floor": 100})
    first.hook = stall
    lost = first.run_epoch()
    assert lost.skipped and "lease" in lost.skipped
    engine = make_engine(state_url)
    with engine.connect() as conn:  # the stalled controller's decisions were rolled back, the new one's kept
        holders = dict(conn.execute(sa.select(Epoch.epoch, Epoch.holder)).all())
    engine.dispose()
    assert holders == {1: first.holder, 2: second.holder}
    assert all(j.attempts <= 1 for j in service.list_jobs())
    check_ledger(state_url)
    first.close()
    second.close()


def _cf_knowing(names: tuple[str, ...]) -> LearnedPredictor:
    """A factor model with pairs of ``names`` only (each pair halves both jobs)."""
    rows = []
    for a in names:
        for b in names:
            wa, wb = PAPER_WORKLOADS[a], PAPER_WORKLOADS[b]
            rows.append({"gpu": "a100-40gb", "workload_a": a, "kind_a": wa.kind.value, "knobs_a": "{}", "params_a": wa.params,
                         "solo_tput_a": 100.0, "colo_tput_a": 50.0, "workload_b": b, "kind_b": wb.kind.value, "knobs_b": "{}",
                         "params_b": wb.params, "solo_tput_b": 100.0, "colo_tput_b": 50.0})
    return LearnedPredictor(fit_model(CFRegressor(epochs=50), validate(pl.DataFrame(rows)).samples()), name="cf-test")


def test_workloads_the_model_never_saw_are_named_in_the_epoch(service: JobService, state_url: str, profiles_dir: Path) -> None:
    """Under cold-start exploration the epoch says which workloads' pairs are planned on the assumption (the status
    page shows the note); without exploration, or once the model knows them, it says nothing."""
    service.submit_document("jobs:\n  - {id: bert-1, workload: bert, floor: 100}\n  - {id: lstm-1, workload: lstm, floor: 100}\n")
    ctl = controller(state_url, profiles_dir, predictor=_cf_knowing(("bert", "resnet50")))
    assert ctl.run_epoch().recorded
    notes = service.epoch_notes("interference model")
    assert len(notes) == 1 and "cf-test" in notes[0] and "lstm" in notes[0] and "bert" not in notes[0] and "1.2x" in notes[0]
    assert not ctl.run_epoch().recorded  # the same note again is no change: nothing new is recorded
    ctl.close()
    assert controller(state_url, profiles_dir, predictor=_cf_knowing(("bert", "lstm")))._cold_start_notes(
        [JobSpec("l", PAPER_WORKLOADS["lstm"])]) == ()
    quiet = controller(state_url, profiles_dir, predictor=_cf_knowing(("bert",)), rules=variant("no-explore"))
    assert quiet._cold_start_notes([JobSpec("l", PAPER_WORKLOADS["lstm"])]) == ()
