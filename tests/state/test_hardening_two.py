"""The second adversarial probe's repros (blast radius, a store that cannot stop planning, a controller that
heals, a fair start deadline): each failed on the code before the fix."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
import time
from pathlib import Path

import polars as pl
import pytest
import sqlalchemy as sa
from state_helpers import check_ledger, make_cluster

from elastico_core.rst.store import ProfileStore
from elastico_core.specs import load_cluster
from elastico_core.state import JobService, JobStatus, StateStore
from elastico_core.state.controller import Controller, ControllerConfig
from elastico_core.state.db import make_engine
from elastico_core.state.models import Epoch, Job, Measurement
from tests.cli_runner import run_cli as run

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
A100 = "a100-40gb_40960_any_any.parquet"
FAST = ControllerConfig(interval_s=0, feedback_interval_s=0, max_backoff_s=0.01)


def _controller(url: str, profiles: Path, cluster: object = None, config: ControllerConfig = FAST) -> Controller:
    return Controller(StateStore.open(url), cluster or load_cluster(EXAMPLES / "cluster.yaml"),  # type: ignore[arg-type]
                      ProfileStore.open(profiles), config=config)


def _statuses(svc: JobService) -> dict[str, str]:
    return {j.id: j.status.value for j in svc.list_jobs()}


# ---- 1. one value a job reports about itself fails no other job ---------------------------------------
@pytest.mark.parametrize(("peak", "throughput"), [(1e300, 200.0), (100.0, 1e300), (100.0, 5e-324)])
def test_a_report_of_absurd_figures_is_quarantined_and_fails_nobody(
    peak: float, throughput: float, state_url: str, profiles_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A finished bert job reports ``peak_mem_mib=1e300`` (in Airflow: the workload's own progress file). It
    used to be written into the store, and the next bert job ended ``failed: cannot be planned: OverflowError``."""
    svc = JobService.open(state_url)
    svc.submit_document("jobs:\n  - {id: bert-alone, workload: bert, floor: 100}\n")
    ctl = _controller(state_url, profiles_dir)
    ctl.run_epoch()
    job = svc.get("bert-alone")
    svc.report_started(job.id, job.token)
    svc.report_finished(job.id, job.token, throughput, peak_mem_mib=peak)  # accepted: the job did finish
    svc.submit_document((EXAMPLES / "jobs.yaml").read_text())
    caplog.set_level(logging.INFO, "elastico.controller")
    for _ in range(2):
        ctl.run_epoch()
    jobs = {j.id: j for j in svc.list_jobs()}
    assert jobs["bert-finetune"].status is JobStatus.ADMITTED, jobs["bert-finetune"].reason
    assert not [j.id for j in jobs.values() if j.status is JobStatus.FAILED]
    notes = svc.store.read(lambda c: c.execute(sa.select(Measurement.fed, Measurement.fed_note)).all())
    assert notes and all(fed and note.startswith("quarantined:") for fed, note in notes), notes
    assert any("quarantined" in r.getMessage() and "bert-alone" in r.getMessage() for r in caplog.records)
    stored = pl.read_parquet(profiles_dir / A100)
    assert stored.filter(pl.col("source") == "measured").height == 0  # nothing of the report reached the store
    check_ledger(state_url)
    ctl.close()
    svc.close()


def test_an_imported_record_of_1e300_is_quarantined(tmp_path: Path, profiles_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = {"record": "solo", "workload": "bert", "knobs": {"micro_batch": 32}, "sm": 0.5, "gpu_mem_mib": 1e300,
              "cpu_cores": 4, "host_mem_mib": 16384, "throughput": 120.0, "host": "h",
              "signature": {"gpu": "a100-40gb", "gpu_mem_mib": 40960, "driver": "550", "framework": "torch-2.8"}}
    good = {**record, "gpu_mem_mib": 20000.0}
    path = tmp_path / "measurements.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps(good) + "\n")
    code, out, err = run(capsys, "profiles", "import", str(path), "--profiles", str(profiles_dir), "--json")
    assert code == 0 and "Traceback" not in err
    got = json.loads(out)
    assert got["profiles"] == 1 and len(got["quarantined"]) == 1 and "above the GPU's memory" in got["quarantined"][0]
    code, _, err = run(capsys, "plan", "--cluster", str(EXAMPLES / "cluster.yaml"), "--jobs", str(EXAMPLES / "jobs.yaml"),
                       "--profiles", str(profiles_dir))
    assert code == 0 and "Traceback" not in err


BERT_KNOBS = {"amp": False, "checkpointing": False, "dp": 1}
BAD_KNOBS = {
    "empty object": "{}",
    "micro_batch 0": json.dumps({**BERT_KNOBS, "micro_batch": 0}),
    "micro_batch negative": json.dumps({**BERT_KNOBS, "micro_batch": -32}),
    "micro_batch NaN": '{"amp":false,"checkpointing":false,"dp":1,"micro_batch":NaN}',
    "micro_batch text": json.dumps({**BERT_KNOBS, "micro_batch": "big"}),
    "micro_batch null": json.dumps({**BERT_KNOBS, "micro_batch": None}),
    "micro_batch of 5,000 digits": '{"amp":false,"checkpointing":false,"dp":1,"micro_batch":' + "9" * 5000 + "}",
    "200k nested brackets": "[" * 200_000,
}


def _with_row(profiles: Path, workload: str, knobs: str, **values: object) -> None:
    """Append one measured row of ``workload`` with the given knobs text (and column values) to the a100 file."""
    path = profiles / A100
    df = pl.read_parquet(path)
    row = df.filter(pl.col("workload") == workload).head(1).with_columns(
        pl.lit(knobs).alias("knobs"), pl.lit("measured").alias("source"),
        *(pl.lit(v, dtype=df.schema[k]).alias(k) for k, v in values.items()))
    pl.concat([df, row]).write_parquet(path)


@pytest.mark.parametrize("case", [*BAD_KNOBS, "max_num_seqs 0", "max_model_len 0"])
def test_a_profile_row_with_bad_knobs_fails_nothing(
    case: str, tmp_path: Path, profiles_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if case in BAD_KNOBS:
        _with_row(profiles_dir, "bert", BAD_KNOBS[case])
    else:
        knobs = {"max_num_seqs": 4, "max_model_len": 8192, "prefix_caching": False, "gpu_memory_utilization": 0.4}
        knobs[case.split()[0]] = 0
        _with_row(profiles_dir, "qwen-1.7b", json.dumps(knobs))
    code, out, err = run(capsys, "plan", "--cluster", str(EXAMPLES / "cluster.yaml"), "--jobs", str(EXAMPLES / "jobs.yaml"),
                         "--profiles", str(profiles_dir))
    assert code == 0 and "Traceback" not in out + err
    url = f"sqlite:///{tmp_path / 'state.db'}"
    assert run(capsys, "jobs", "submit", "--spec", str(EXAMPLES / "jobs.yaml"), "--state", url)[0] == 0
    svc = JobService.open(url)
    ctl = _controller(url, profiles_dir)
    for _ in range(2):  # the 200k brackets used to fail epoch 1 and mark all 11 jobs failed in epoch 2
        assert ctl.run_epoch().skipped is None
    statuses = _statuses(svc)
    assert len(statuses) == 11 and set(statuses.values()) == {"admitted"}, statuses
    assert any("rows quarantined" in n for n in svc.epoch_notes("profile store:")) or ctl.profiles.quarantined()
    ctl.close()
    svc.close()


@pytest.mark.parametrize("throughput", [5e-324, 1e-300, 1e300, 1e12])
def test_denormal_and_absurd_throughputs_are_quarantined(throughput: float, profiles_dir: Path) -> None:
    _with_row(profiles_dir, "bert", json.dumps({**BERT_KNOBS, "micro_batch": 32}), throughput=throughput)
    store = ProfileStore.open(profiles_dir)
    bad = store.quarantined()
    assert len(bad) == 1 and "throughput" in bad[0].reason and bad[0].workload == "bert"


# ---- 2. a corrupt profile file stops no planning --------------------------------------------------------
def test_a_truncated_profile_file_and_a_report_do_not_stop_planning(
    tmp_path: Path, profiles_dir: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """``: > profiles/a100-40gb_…parquet`` and any job reporting: every epoch used to fail with a traceback
    (the write read the damaged file first), new jobs waited forever, and ``--epochs 4`` exited 0."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    svc = JobService.open(url)
    svc.submit_document("jobs:\n  - {id: bert-alone, workload: bert, floor: 100}\n")
    ctl = _controller(url, profiles_dir)
    ctl.run_epoch()
    job = svc.get("bert-alone")
    svc.report_started(job.id, job.token)
    svc.report_finished(job.id, job.token, 180.0, peak_mem_mib=20000.0)
    (profiles_dir / A100).write_bytes(b"")  # truncated
    svc.submit_document((EXAMPLES / "jobs.yaml").read_text())
    caplog.set_level(logging.INFO, "elastico.controller")
    result = ctl.run(max_epochs=3)
    assert result.ok, [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if r.exc_info]
    statuses = _statuses(svc)
    assert statuses.pop("bert-alone") == "finished" and set(statuses.values()) == {"admitted"}, statuses
    moved = list(profiles_dir.glob(f"{A100}.corrupt-*"))
    assert len(moved) == 1 and moved[0].stat().st_size == 0  # kept as evidence, out of the store's way
    assert pl.read_parquet(profiles_dir / A100).height == 1  # the report's row, in a fresh file
    assert any("moved aside" in r.getMessage() for r in caplog.records)
    svc.close()


def test_the_exit_code_says_whether_every_epoch_ran(
    tmp_path: Path, profiles_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    assert run(capsys, "jobs", "submit", "--spec", str(EXAMPLES / "jobs.yaml"), "--state", url)[0] == 0
    args = ["controller", "run", "--epochs", "2", "--interval", "0.1", "--cluster", str(EXAMPLES / "cluster.yaml"),
            "--state", url, "--profiles", str(profiles_dir)]
    assert run(capsys, *args)[0] == 0
    from elastico_core.pds.planner import Planner

    def broken(self: Planner, inp: object) -> object:
        raise RuntimeError("planner bug")

    monkeypatch.setattr(Planner, "plan", broken)
    caplog.clear()
    code = run(capsys, *args)[0]
    failed = [r for r in caplog.records if r.name == "elastico.controller" and r.levelno == logging.ERROR]
    assert code == 1 and len(failed) == 2 and all("planner bug" in r.getMessage() and "retrying in" in r.getMessage() for r in failed)
    assert [bool(r.exc_info) for r in failed] == [True, False]  # the traceback once, then one line per epoch


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_or_a_folder_named_parquet_is_skipped(tmp_path: Path, profiles_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(profiles_dir / "zz-fifo.parquet")
    (profiles_dir / "zz-dir.parquet").mkdir()
    pl.read_parquet(profiles_dir / A100).write_parquet(profiles_dir / "zz-dir.parquet" / "part.parquet")
    done: list[tuple[int, str, str]] = []
    t = threading.Thread(target=lambda: done.append(run(capsys, "plan", "--cluster", str(EXAMPLES / "cluster.yaml"),
                                                        "--jobs", str(EXAMPLES / "jobs.yaml"), "--profiles", str(profiles_dir))),
                         daemon=True)  # fmt: skip
    t.start()
    t.join(120)
    assert done, "plan hung on a FIFO named *.parquet"
    store = ProfileStore.open(profiles_dir)
    store.frame()
    problems = " ".join(str(p) for p in store.problems)
    assert "zz-fifo.parquet" in problems and "zz-dir.parquet" in problems and "not a regular file" in problems


def test_a_file_above_the_size_cap_is_skipped(profiles_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from elastico_core.rst import store as store_module

    monkeypatch.setattr(store_module, "MAX_FILE_BYTES", 1024)
    store = ProfileStore.open(profiles_dir)
    store.frame()
    assert store.problems and all("limit of a profile file" in str(p) for p in store.problems)


# ---- 3. the controller heals -----------------------------------------------------------------------------
def _spell(engine: sa.Engine, on: threading.Event) -> None:
    """While ``on`` is set, every new connection of ``engine`` is read-only for life — what SQLite does to a
    connection opened while its file is immutable (``chattr +i``: it falls back to read-only), and what
    PostgreSQL does to a session opened under ``default_transaction_read_only`` — played on this engine
    only, so no other process or test sees the spell."""

    @sa.event.listens_for(engine, "connect")
    def _read_only(dbapi_conn: object, _record: object) -> None:
        if not on.is_set():
            return
        cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
        if engine.dialect.name == "sqlite":
            cur.execute("PRAGMA query_only = ON")
        else:
            cur.execute("SET SESSION default_transaction_read_only = on")
            dbapi_conn.commit()  # type: ignore[attr-defined]
        cur.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The controller's warnings and errors (Airflow's logging set-up, once imported, lets INFO through too)."""
    return [r for r in caplog.records if r.name == "elastico.controller" and r.levelno >= logging.WARNING]


def test_the_controller_heals_after_a_read_only_spell(state_url: str, profiles_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """After a read-only spell (SQLite ``chattr +i`` for 4 s; PostgreSQL ``default_transaction_read_only`` on,
    then off) the controller kept failing "read-only" for as long as it ran (95 s, 54 s observed) while other
    processes wrote fine: the connections it had opened during the spell stayed in its pool."""
    svc = JobService.open(state_url)
    svc.submit_document("jobs:\n  - {id: a, workload: bert, floor: 100}\n")
    ctl = _controller(state_url, profiles_dir, config=ControllerConfig(interval_s=0.05, max_backoff_s=0.2))
    assert ctl.run_epoch().counts["admitted"] == 1
    on = threading.Event()
    _spell(ctl.store.engine, on)
    on.set()
    ctl.store.engine.dispose()  # a reconnect during the spell: the pool now holds read-only connections
    caplog.set_level(logging.WARNING, "elastico.controller")
    during = ctl.run(max_epochs=3)
    warned = [r.getMessage() for r in _warnings(caplog)]
    assert during.failed == 3 and warned and all("read-only" in m for m in warned), warned
    on.clear()  # the spell is over; other processes write fine
    svc.submit_document("jobs:\n  - {id: b, workload: bert, floor: 100}\n")
    t0 = time.monotonic()
    after = ctl.run(max_epochs=2)
    assert after.ok and time.monotonic() - t0 < 30, [r.getMessage() for r in caplog.records]
    assert _statuses(svc) == {"a": "admitted", "b": "admitted"}
    check_ledger(state_url)
    svc.close()


def test_a_deleted_state_file_is_reported_and_never_recreated(tmp_path: Path, profiles_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The SQLite file deleted mid-run: the controller used to log ``idle`` for ever, planning into the
    unlinked file, while new processes created and used a new one (a silent split brain)."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    svc = JobService.open(url)
    svc.submit_document("jobs:\n  - {id: a, workload: bert, floor: 100}\n")
    svc.close()
    ctl = _controller(url, profiles_dir)
    assert ctl.run_epoch().counts["admitted"] == 1
    for f in tmp_path.glob("state.db*"):
        f.unlink()
    caplog.set_level(logging.WARNING, "elastico.controller")
    gone = ctl.run(max_epochs=2)
    assert gone.failed == 2 and not (tmp_path / "state.db").exists()  # the controller created nothing
    warned = [r.getMessage() for r in _warnings(caplog)]
    assert warned and all("was deleted" in m for m in warned), warned
    svc = JobService.open(url)  # someone creates a new state under the same name
    svc.submit_document("jobs:\n  - {id: b, workload: bert, floor: 100}\n")
    caplog.clear()
    replaced = ctl.run(max_epochs=2)
    assert replaced.failed == 2 and any("was replaced" in r.getMessage() for r in caplog.records)
    assert _statuses(svc) == {"b": "pending"}  # not planned by a controller that took it for its old state
    assert svc.store.read(lambda c: c.execute(sa.select(sa.func.count()).select_from(Epoch)).scalar_one()) == 0
    fresh = _controller(url, profiles_dir)  # a controller started on the new state plans it
    assert fresh.run_epoch().counts["admitted"] == 1
    fresh.close()
    svc.close()


def test_a_state_unreachable_at_start_is_retried(
    capsys: pytest.CaptureFixture[str], profiles_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It used to exit 1 at once, although a controller that lost the state later retries with backoff."""
    url = "postgresql+psycopg2://u:s3cret@127.0.0.1:1/db"
    t0 = time.monotonic()
    caplog.set_level(logging.WARNING, "elastico.controller")
    code, out, err = run(capsys, "controller", "run", "--epochs", "3", "--interval", "0.1", "--cluster",
                         str(EXAMPLES / "cluster.yaml"), "--state", url, "--profiles", str(profiles_dir))
    said = [r.getMessage() for r in caplog.records if "state not available at start" in r.getMessage()]
    assert code == 1 and "Traceback" not in err and "s3cret" not in out + err + " ".join(said)
    assert len(said) == 2 and time.monotonic() - t0 >= 2.5  # waited 1 s, then 2 s; the third try failed for good


def test_open_with_retry_returns_the_store_once_it_answers() -> None:
    from elastico_core.state.controller import open_with_retry
    from elastico_core.state.errors import StateUnavailable

    tries: list[int] = []

    def flaky() -> StateStore:
        tries.append(1)
        if len(tries) < 3:
            raise StateUnavailable("state x is unreachable (refused)")
        return "store"  # type: ignore[return-value]

    opened = open_with_retry(flaky, ControllerConfig(interval_s=0, max_backoff_s=0.01), threading.Event())
    assert opened.store == "store" and opened.failures == 2


# ---- 4. a fair start deadline --------------------------------------------------------------------------
def test_a_released_job_goes_behind_the_queue(state_url: str, profiles_dir: Path) -> None:
    """1 GPU, one job per GPU, a (bert) and b (resnet50): a was released and re-admitted in the same epoch
    nine times while b stayed pending. Now a re-enters the queue at its release time, behind b."""
    svc = JobService.open(state_url)
    svc.submit_document("jobs:\n  - {id: a, workload: bert, floor: 100}\n  - {id: b, workload: resnet50, floor: 100}\n")
    config = ControllerConfig(interval_s=0, feedback_interval_s=0, start_deadline_s=3)
    ctl = Controller(StateStore.open(state_url), make_cluster(1, 1, max_jobs=1), ProfileStore.open(profiles_dir), config=config)
    admitted: list[str] = []
    for _ in range(4):  # nobody ever starts anything: the GPU must alternate, never stay with a
        report = ctl.run_epoch()
        held = [j.id for j in svc.list_jobs() if j.status is JobStatus.ADMITTED]
        assert len(held) == 1, held
        admitted.append(held[0])
        engine = make_engine(state_url)  # time passes beyond the deadline (no sleeping on a loaded machine)
        with engine.begin() as conn:
            conn.execute(sa.update(Job).where(Job.id == held[0]).values(
                admitted_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=10)))
        engine.dispose()
        assert report.counts.get("released", 0) == (0 if len(admitted) == 1 else 1)
    first, second = admitted[0], ({"a", "b"} - {admitted[0]}).pop()
    assert admitted == [first, second, first, second]  # the reservation alternates: nobody starves
    check_ledger(state_url)
    ctl.close()
    svc.close()


def test_a_switch_request_does_not_shelter_a_job_nobody_started(state_url: str, profiles_dir: Path) -> None:
    """Found by the soak: an admitted job asked to switch before it ever started left ``admitted`` for
    ``switching`` and held its reservation, out of the deadline's reach, until the request was withdrawn."""
    svc = JobService.open(state_url)
    svc.submit_document("jobs:\n  - {id: a, workload: bert, floor: 100}\n")
    config = ControllerConfig(interval_s=0, feedback_interval_s=0, start_deadline_s=3)
    ctl = Controller(StateStore.open(state_url), make_cluster(1, 1, max_jobs=1), ProfileStore.open(profiles_dir), config=config)
    ctl.run_epoch()
    engine = make_engine(state_url)  # the planner's switch request, as the recorder writes it (same GPUs, same memory)
    with engine.begin() as conn:
        plan = conn.execute(sa.select(Job.plan).where(Job.id == "a")).scalar_one()
        conn.execute(sa.update(Job).where(Job.id == "a").values(
            status="switching", target={**plan, "token": "a:2"}, pending_action="switch", version=Job.version + 1,
            admitted_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=10)))
    engine.dispose()
    report = ctl.run_epoch()
    assert report.counts["released"] == 1
    job = svc.get("a")
    assert job.queue_code in ("start_deadline", None) or job.status is JobStatus.ADMITTED  # re-queued, maybe re-admitted
    check_ledger(state_url)
    ctl.close()
    svc.close()


def test_a_job_whose_planning_raises_is_set_aside_not_failed(
    state_url: str, profiles_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected exception while planning one job (here: every profile lookup of bert raises) sets that
    job aside with a retriable status and a reason; the others are planned; it is planned once it can be."""
    svc = JobService.open(state_url)
    svc.submit_document("jobs:\n  - {id: b, workload: bert, floor: 100}\n  - {id: r, workload: resnet50, floor: 100}\n")
    real = ProfileStore.lookup

    def broken(self: ProfileStore, workload: object, *args: object, **kw: object) -> object:
        if getattr(workload, "name", "") == "bert":
            raise OverflowError("(34, 'Numerical result out of range')")
        return real(self, workload, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ProfileStore, "lookup", broken)
    ctl = _controller(state_url, profiles_dir, cluster=make_cluster(1, 2))
    report = ctl.run_epoch()
    assert report.skipped is None
    b, r = svc.get("b"), svc.get("r")
    assert r.status is JobStatus.ADMITTED
    assert b.status is JobStatus.PENDING and b.queue_code == "set-aside" and "OverflowError" in b.reason, b.reason
    assert ctl.run_epoch().skipped is None and svc.get("b").queue_code == "set-aside"  # retried, not replayed
    monkeypatch.setattr(ProfileStore, "lookup", real)  # the data it needs is fine again
    ctl.run_epoch()
    assert svc.get("b").status is JobStatus.ADMITTED
    ctl.close()
    svc.close()
