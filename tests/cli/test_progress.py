"""Progress and ETA of running jobs in ``jobs list`` / ``jobs show``, and the listing's filters by user, DAG
and queue — the same figures the status page shows (``model.progress``)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from elastico_core.model.progress import Eta, describe, duration, estimate
from tests.cli_runner import run_cli
from tests.conftest import REPO

JOBS = """\
jobs:
  - {id: mine, workload: lstm, floor: 1, user: ana, queue: team-a}
  - {id: theirs, workload: ncf, floor: 1, user: bo, queue: team-b}
"""


@pytest.fixture
def running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Two submitted jobs and one Airflow job, all admitted; ``mine`` running with a progress report."""
    from elastico_core.state import ExternalIdentity, JobService

    state = str(tmp_path / "state.db")
    spec = tmp_path / "jobs.yaml"
    spec.write_text(JOBS)
    assert run_cli(capsys, "jobs", "submit", "--spec", str(spec), "--state", state)[0] == 0
    svc = JobService.open(f"sqlite:///{state}")
    svc.register({"workload": "dcgan", "floor": 1}, ExternalIdentity.airflow("training_runs", "manual__1", "train", 2))
    svc.close()
    code, _, err = run_cli(capsys, "controller", "run", "--once", "--cluster", str(REPO / "examples/cluster.yaml"),
                           "--state", state, "--predictor", "table")
    assert code == 0, err
    svc = JobService.open(f"sqlite:///{state}")
    job = svc.get("mine")
    svc.report_started(job.id, job.token)
    svc.report_throughput(job.id, job.token, 500.0, steps=12, done=1200.0, total_steps=20,
                          measured_on="cpu-test-cpu|2048|1c|torch-2.13.0")  # a local run on this machine's CPU
    svc.close()
    return state


def test_list_shows_progress_and_eta_at_80_columns(
    running: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from elastico_core.cli.common import stdout

    monkeypatch.setattr(stdout, "width", 80)
    code, out, _ = run_cli(capsys, "jobs", "list", "--state", running)
    lines = out.splitlines()
    assert code == 0 and all(len(line) <= 80 for line in lines)

    def block(prefix: str) -> str:  # a job's line and the indented lines under it
        i = next(i for i, line in enumerate(lines) if line.startswith(prefix))
        j = next((k for k in range(i + 1, len(lines)) if not lines[k].startswith(" ")), len(lines))
        return " ".join(" ".join(lines[i:j]).split())

    # 8 steps left at 100 samples a step, 500 samples/s: 1.6 s from the report (less by now)
    assert "12/20 steps (60%), ETA" in block("mine ") and "running" in block("mine ")
    assert "starting" in block("training_runs.train.2-")  # admitted, no report yet
    assert "PROGRESS" in lines[1] or "12/20 steps" not in lines[2]  # a column, or moved under the job
    code, out, _ = run_cli(capsys, "jobs", "list", "--state", running, "--json")
    rec = {j["id"]: j for j in json.loads(out)}["mine"]
    assert rec["progress"]["steps"] == 12 and rec["progress"]["total_steps"] == 20 and rec["queue"] == "team-a"


def test_show_says_how_far_it_is(running: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "jobs", "show", "mine", "--state", running)
    flat = " ".join(out.split())
    assert code == 0 and "progress 12/20 steps (60%), ETA" in flat and "500 samples/s (reported" in flat
    assert "(queue team-a, user ana)" in flat
    # a CPU measurement beside a GPU prediction says so
    assert "measured 500 samples/s on this machine's CPU (cpu-test-cpu|2048|1c|torch-2.13.0), not comparable" in flat
    assert "predicted" in flat and " on a100-40gb " in flat


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (("--user", "ana"), {"mine"}),
        (("--queue", "team-b"), {"theirs"}),
        (("--dag", "training_runs"), {"training_runs.train.2-"}),
        (("--user", "ana", "--queue", "team-b"), set()),
        (("--dag", "no-such-dag"), set()),
    ],
    ids=["user", "queue", "dag", "user-and-queue", "unknown-dag"],
)
def test_list_filters_by_user_dag_and_queue(
    running: str, flags: tuple[str, ...], expected: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "jobs", "list", "--state", running, "--json", *flags)
    ids = {j["id"] if not j["id"].startswith("training_runs") else "training_runs.train.2-" for j in json.loads(out)}
    assert code == 0 and ids == expected
    code, out, _ = run_cli(capsys, "jobs", "list", "--state", running, *flags)
    assert code == 0 and f"{len(expected)} jobs of " in out


def test_a_bad_queue_name_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "jobs.yaml"
    spec.write_text("jobs:\n  - {id: q, workload: lstm, queue: Team A}\n")
    code, _, err = run_cli(capsys, "jobs", "submit", "--spec", str(spec), "--state", str(tmp_path / "s.db"))
    assert code == 2 and err.count("\n") == 1 and "queue" in err


@pytest.mark.parametrize(
    ("steps", "done", "total", "work", "rate", "elapsed", "fraction", "left"),
    [
        (12, 1200.0, 20, None, 500.0, 0.0, 0.6, 1.6),  # 8 steps of 100 samples at 500/s
        (12, 1200.0, 20, None, 500.0, 1.0, 0.6, 0.6),  # a second after the report
        (0, 0.0, 20, None, 500.0, 0.0, 0.0, None),  # no step yet: no rate of work per step
        (5, 500.0, None, 2000.0, 100.0, 0.0, 0.25, 15.0),  # the spec's work: 1,500 left at 100/s
        (5, 500.0, None, None, 100.0, 0.0, None, None),  # no total known at all
    ],
)
def test_eta_arithmetic(steps: int, done: float, total: int | None, work: float | None, rate: float,
                        elapsed: float, fraction: float | None, left: float | None) -> None:
    eta = estimate(steps, done, total, work, rate, elapsed_s=elapsed)
    assert eta.fraction == (pytest.approx(fraction) if fraction is not None else None)
    assert eta.remaining_s == (pytest.approx(left) if left is not None else None)


def test_progress_words() -> None:
    assert describe(12, 20, Eta(0.6, 95.0)) == "12/20 steps (60%), ETA 2 min"
    assert describe(3, 36, Eta(3 / 36, None), "rows") == "3/36 rows (8%)"
    assert describe(7, None, Eta(None, None)) == "7 steps"
    assert [duration(s) for s in (5, 600, 7200, 3 * 86400, None)] == ["5 s", "10 min", "2.0 h", "3.0 d", "–"]


def test_the_launchers_summary_counts_steps_of_a_total_and_rows_of_a_shard() -> None:
    import sys

    sys.path.insert(0, str(REPO / "plugins"))
    from elastico_airflow.supervise import summarize

    t = dt.datetime.now(dt.UTC).timestamp()
    train = [{"event": "start", "step": 0, "samples": 0, "total_steps": 20, "device": "cpu"},
             *({"event": "step", "step": i, "samples": 64 * i, "rate": 640.0, "t": t} for i in range(1, 6))]
    s = summarize(train)
    assert (s.done_items, s.total_items, s.items) == (5, 20, "steps")
    infer = [{"event": "start", "rows": 36, "pending": 30, "engine": "vllm"},  # a resumed shard: 6 rows done before
             {"event": "step", "step": 1, "samples": 40, "rate": 400.0, "rows": 0},
             {"event": "step", "step": 2, "samples": 90, "rate": 500.0, "rows": 3}]
    s = summarize(infer)
    assert (s.done_items, s.total_items, s.items) == (9, 36, "rows")
