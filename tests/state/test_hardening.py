"""The adversarial probe's repros, end to end through the CLI: each failed on the code before the fix."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.cli_runner import run_cli as run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("bad", [float("nan"), None, float("inf")])
def test_a_bad_profile_value_never_fails_the_queue(
    bad: float | None, tmp_path: Path, profiles_dir: Path, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    path = profiles_dir / "a100-40gb_40960_any_any.parquet"
    column = "throughput" if bad == float("inf") else "gpu_mem_mib"
    pl.read_parquet(path).with_columns(pl.lit(bad, dtype=pl.Float64).alias(column)).write_parquet(path)
    assert run(capsys, "jobs", "submit", "--spec", str(EXAMPLES / "jobs.yaml"), "--state", url)[0] == 0
    code, out, err = run(capsys, "controller", "run", "--once", "--cluster", str(EXAMPLES / "cluster.yaml"),
                         "--state", url, "--profiles", str(profiles_dir), "--json")
    assert code == 0, err
    assert any("rows quarantined" in r.message and path.name in r.message for r in caplog.records)
    code, out, _ = run(capsys, "jobs", "list", "--json", "--state", url)
    jobs = json.loads(out)
    assert len(jobs) == 11 and not [j for j in jobs if j["status"] == "failed"]
    assert all(j["status"] == "admitted" or j.get("reason") for j in jobs), jobs
    # the one-shot planner says the same and prints no traceback
    code, out, err = run(capsys, "plan", "--cluster", str(EXAMPLES / "cluster.yaml"), "--jobs", str(EXAMPLES / "jobs.yaml"),
                         "--profiles", str(profiles_dir))
    assert code == 0 and "Traceback" not in err + out


# ---- secrets --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg2://u@127.0.0.1:1/db?password=pw",
        "postgresql+psycopg2://u:pw@127.0.0.1:1/db",
        "postgresql://u@127.0.0.1:1/db?sslmode=require&sslpassword=pw",
    ],
)
def test_state_upgrade_prints_no_password(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "state", "upgrade", "--state", url)
    assert code == 1 and "pw" not in out + err
    assert err.count("\n") == 1 and "unreachable" in err and "***" in err


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg2://u@h:5432/db?password=pw", "postgresql+psycopg2://u@h:5432/db?password=***"),
        ("postgresql://u:p%40w@h/db?sslmode=require&sslpassword=pw", "postgresql://u:***@h/db?sslmode=require&sslpassword=***"),
        ("postgresql://u:pw@h/db?options=-c%20x&PASSWORD=pw", "postgresql://u:***@h/db?options=-c%20x&PASSWORD=***"),
        ("host=h dbname=d password=pw", "host=h dbname=d password=***"),
        ("sqlite:////var/lib/e/state.db", "sqlite:////var/lib/e/state.db"),
        ("postgresql://u@h/db?sslmode=verify-full", "postgresql://u@h/db?sslmode=verify-full"),
    ],
)
def test_redaction_covers_every_place_a_driver_takes_a_password(url: str, shown: str) -> None:
    from elastico_core.state.url import has_secret, redact_url, redacted

    assert redact_url(url) == shown and has_secret(url) == (shown != url)
    assert "pw" not in redacted(url)


# ---- a read-only or unreachable state -------------------------------------------------------------
def _read_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    url = f"sqlite:///{tmp_path / 'ro.db'}"
    assert run(capsys, "jobs", "submit", "--spec", str(EXAMPLES / "jobs.yaml"), "--state", url)[0] == 0
    return f"sqlite:///file:{tmp_path / 'ro.db'}?mode=ro&uri=true"  # root ignores file modes: open it read-only


def test_a_read_only_state_is_one_line_per_failure(
    tmp_path: Path, profiles_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ro = _read_only(tmp_path, capsys)
    code, out, err = run(capsys, "jobs", "cancel", "bert-finetune", "--state", ro)
    assert code == 1 and err.count("\n") == 1 and "read-only" in err and "Traceback" not in err
    code, out, _ = run(capsys, "jobs", "list", "--json", "--state", ro)  # reads still work
    assert code == 0 and len(json.loads(out)) == 11
    code, out, err = run(capsys, "controller", "run", "--once", "--cluster", str(EXAMPLES / "cluster.yaml"),
                         "--state", ro, "--profiles", str(profiles_dir))
    assert code == 1 and "read-only" in err and "Traceback" not in err


def test_the_controller_backs_off_while_the_state_is_read_only(
    tmp_path: Path, profiles_dir: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    from elastico_core.rst.store import ProfileStore
    from elastico_core.specs import load_cluster
    from elastico_core.state import StateStore
    from elastico_core.state.controller import Controller, ControllerConfig

    ro = _read_only(tmp_path, capsys)
    store = StateStore.open(ro)
    config = ControllerConfig(interval_s=0.0, max_backoff_s=0.05)
    ctl = Controller(store, load_cluster(EXAMPLES / "cluster.yaml"), ProfileStore.open(profiles_dir), config=config)
    caplog.set_level("WARNING")
    result = ctl.run(max_epochs=3)
    assert result.epochs == 3 and result.failed == 3
    store.close()
    lines = [r for r in caplog.records if r.name == "elastico.controller"]
    assert len(lines) == 3 and all("read-only" in r.getMessage() and "retrying in" in r.getMessage() for r in lines)
    assert not any(r.exc_info for r in caplog.records)


# ---- the start deadline ---------------------------------------------------------------------------
def test_an_admitted_job_nobody_starts_is_released_after_the_deadline(state_url: str, profiles_dir: Path) -> None:
    import datetime as dt

    import sqlalchemy as sa
    from state_helpers import check_ledger, make_cluster

    from elastico_core.rst.store import ProfileStore
    from elastico_core.state import JobService, JobStatus, StateConflict, StateStore
    from elastico_core.state.controller import Controller, ControllerConfig
    from elastico_core.state.db import make_engine
    from elastico_core.state.models import Event, Job

    svc = JobService.open(state_url)
    svc.submit_document("jobs:\n  - {id: waiter, workload: bert, floor: 100}\n  - {id: behind, workload: bert, floor: 100}\n")
    config = ControllerConfig(interval_s=0, feedback_interval_s=0, start_deadline_s=60)
    ctl = Controller(StateStore.open(state_url), make_cluster(1, 1, max_jobs=1), ProfileStore.open(profiles_dir), config=config)
    first = ctl.run_epoch()
    assert first.counts["admitted"] == 1 and first.counts["released"] == 0
    held = next(j for j in svc.list_jobs() if j.status is JobStatus.ADMITTED)
    assert held.plan is not None
    for _ in range(3):  # within the deadline nothing moves
        assert ctl.run_epoch().counts.get("released", 0) == 0
    engine = make_engine(state_url)  # a minute passes (no sleeping: loaded machines make timing flaky)
    with engine.begin() as conn:
        admitted = conn.execute(sa.select(Job.admitted_at).where(Job.id == held.id)).scalar_one()
        conn.execute(sa.update(Job).where(Job.id == held.id).values(admitted_at=admitted - dt.timedelta(seconds=61)))
    engine.dispose()
    report = ctl.run_epoch()
    assert report.counts["released"] == 1, report
    again = svc.get(held.id)
    # re-queued with a reason, then planned again at once: the GPU went to the head of the queue (a new token)
    assert again.plan is None or again.plan.token != held.plan.token
    events = svc.store.read(lambda c: c.execute(
        sa.select(Event.kind, Event.detail).where(Event.job_id == held.id, Event.kind == "start-deadline")).all())
    assert len(events) == 1 and "never started" in events[0][1] and "start deadline 60 s" in events[0][1]
    with pytest.raises(StateConflict):  # a launcher that wakes up late cannot run on GPUs given away
        svc.report_started(held.id, held.plan.token)
    assert sum(j.status is JobStatus.ADMITTED for j in svc.list_jobs()) == 1
    check_ledger(state_url)
    ctl.close()
    svc.close()


def test_the_default_deadline_is_a_few_epochs_beyond_the_launch_timeout() -> None:
    from elastico_core.state.controller import LAUNCH_TIMEOUT_S, ControllerConfig

    assert ControllerConfig(interval_s=5).start_deadline == LAUNCH_TIMEOUT_S + 15
    assert ControllerConfig(start_deadline_s=0).start_deadline == 0  # never


@pytest.mark.postgres
def test_a_read_only_postgresql_state_is_one_line(pg_url: str, profiles_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A hot standby or ``default_transaction_read_only``: ``ReadOnlySqlTransaction`` becomes one line."""
    import sqlalchemy as sa

    assert run(capsys, "jobs", "submit", "--spec", str(EXAMPLES / "jobs.yaml"), "--state", pg_url)[0] == 0
    url = sa.engine.make_url(pg_url)
    ro = url.update_query_dict({"options": url.query["options"] + " -cdefault_transaction_read_only=on"})
    ro_url = ro.render_as_string(hide_password=False)
    code, _, err = run(capsys, "jobs", "cancel", "bert-finetune", "--state", ro_url)
    assert code == 1 and err.count("\n") == 1 and "read-only" in err and "elastico:elastico" not in err
    code, _, err = run(capsys, "controller", "run", "--once", "--cluster", str(EXAMPLES / "cluster.yaml"),
                       "--state", ro_url, "--profiles", str(profiles_dir))
    assert code == 1 and "read-only" in err and "Traceback" not in err
