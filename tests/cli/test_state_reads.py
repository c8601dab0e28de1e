"""A read never writes: every command that only reads opens an existing ElastiCo state or fails in one line,
refuses what is not an ElastiCo state without touching it (bytes and mtime), and names the state it read.
Without flags the command line finds the project's state (``[tool.elastico] state`` in pyproject.toml)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from tests.cli_runner import run_cli
from tests.conftest import REPO

READS = [("jobs", "list"), ("jobs", "list", "--json"), ("jobs", "show", "bert-finetune"), ("state", "current")]
WRITES_INTO_EXISTING = [("jobs", "cancel", "bert-finetune"), ("jobs", "requeue", "bert-finetune")]
OLD = 1_500_000_000  # a file's mtime long ago: any write moves it


def _mlflow_like(path: Path) -> None:
    """A SQLite database of another application (the tables MLflow's store starts with)."""
    conn = sqlite3.connect(path)
    for table in ("alembic_version (version_num TEXT)", "experiments (experiment_id INTEGER, name TEXT)",
                  "runs (run_uuid TEXT, experiment_id INTEGER)", "metrics (key TEXT, value REAL)"):
        conn.execute(f"CREATE TABLE {table}")
    conn.execute("INSERT INTO alembic_version VALUES ('1b5f0d9ad7c1')")
    conn.commit()
    conn.close()


def _targets(tmp_path: Path) -> dict[str, Path]:
    yaml_file = tmp_path / "empty.yaml"
    yaml_file.write_text("cluster: {}\n")
    mlflow_db = tmp_path / "mlflow.db"
    _mlflow_like(mlflow_db)
    empty = tmp_path / "zero.db"
    empty.write_bytes(b"")
    for p in (yaml_file, mlflow_db, empty):
        os.utime(p, (OLD, OLD))
    return {"yaml": yaml_file, "mlflow": mlflow_db, "zero-length": empty, "cluster-example": REPO / "examples/cluster.yaml"}


def _snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


@pytest.mark.parametrize("command", READS + WRITES_INTO_EXISTING, ids=lambda c: " ".join(c))
@pytest.mark.parametrize("target", ["yaml", "mlflow", "zero-length", "cluster-example"])
def test_a_file_that_is_not_a_state_is_refused_untouched(
    command: tuple[str, ...], target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _targets(tmp_path)[target]
    before = _snapshot(path)
    siblings = sorted(p.name for p in path.parent.iterdir())
    code, out, err = run_cli(capsys, *command, "--state", str(path))
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert path.name in err and ("not an ElastiCo state" in err or "no ElastiCo state" in err)
    assert _snapshot(path) == before, "the file changed"
    assert sorted(p.name for p in path.parent.iterdir()) == siblings, "a file appeared beside it"


@pytest.mark.parametrize("command", READS + WRITES_INTO_EXISTING, ids=lambda c: " ".join(c))
def test_a_missing_state_is_one_line_and_nothing_is_created(
    command: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "nonexistent" / "dir" / "x.db"
    code, _, err = run_cli(capsys, *command, "--state", str(where))
    assert code == 2 and err.count("\n") == 1
    assert f"no ElastiCo state at {where}" in err and "elastico state upgrade" in err
    assert not (tmp_path / "nonexistent").exists()


def test_writes_refuse_a_foreign_database_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``jobs submit``, ``state upgrade`` and ``controller run`` create a missing state, never one inside MLflow's."""
    mlflow_db = _targets(tmp_path)["mlflow"]
    before = _snapshot(mlflow_db)
    for command in (("jobs", "submit", "--spec", str(REPO / "examples/jobs.yaml")), ("state", "upgrade"),
                    ("controller", "run", "--once", "--cluster", str(REPO / "examples/cluster.yaml"))):
        code, _, err = run_cli(capsys, *command, "--state", str(mlflow_db))
        assert code == 2 and "another application" in err and err.count("\n") == 1, command
    assert _snapshot(mlflow_db) == before


def test_reads_leave_a_state_as_it_was_and_name_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state.db"
    code, _, err = run_cli(capsys, "jobs", "submit", "--spec", str(REPO / "examples/jobs.yaml"), "--state", str(state))
    assert code == 0 and f"created an ElastiCo state at {state}" in err
    code, _, _ = run_cli(capsys, "controller", "run", "--once", "--cluster", str(REPO / "examples/cluster.yaml"),
                         "--state", str(state), "--predictor", "table")
    assert code == 0
    for suffix in ("-wal", "-shm"):  # as a stopped controller leaves it: everything checkpointed into the file
        Path(f"{state}{suffix}").unlink(missing_ok=True)
    os.utime(state, (OLD, OLD))
    before = _snapshot(state)
    for command in READS:
        code, out, err = run_cli(capsys, *command, "--state", str(state))
        assert code == 0, (command, err)
        if "--json" not in command:
            assert str(state) in " ".join(out.split()), command  # says which state it read
        assert _snapshot(state) == before, command


def test_an_old_schema_is_not_migrated_by_a_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from elastico_core.state import StateStore, migrate

    state = tmp_path / "old.db"
    store = StateStore.open(f"sqlite:///{state}")
    migrate.downgrade(store.engine, "0002")
    store.close()
    before = _snapshot(state)
    code, _, err = run_cli(capsys, "jobs", "list", "--state", str(state))
    assert code == 2 and err.count("\n") == 1 and "elastico state upgrade" in err and "0002" in err
    assert _snapshot(state) == before
    code, out, _ = run_cli(capsys, "state", "upgrade", "--state", str(state))
    assert code == 0 and "migrated from 0002 to" in out


def test_the_project_setting_locates_the_state_from_any_subfolder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What ``make demo`` and ``make ui`` use (they ask ``elastico state where --url``), the CLI finds unflagged."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.elastico]\nstate = "run/state.db"\n')
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    monkeypatch.delenv("ELASTICO_STATE_URL", raising=False)
    code, out, _ = run_cli(capsys, "state", "where", "--url")
    assert code == 0 and out.strip() == f"sqlite:///{tmp_path / 'run/state.db'}"
    code, out, _ = run_cli(capsys, "state", "where")
    assert code == 0 and "[tool.elastico] state" in out and "nothing yet" in out
    assert run_cli(capsys, "jobs", "submit", "--spec", str(REPO / "examples/jobs.yaml"))[0] == 0
    assert (tmp_path / "run/state.db").is_file()
    code, out, _ = run_cli(capsys, "jobs", "list")
    assert code == 0 and "11 jobs in" in out and "run/state.db" in out
    monkeypatch.setenv("ELASTICO_STATE_URL", str(tmp_path / "env.db"))  # the variable beats the project
    code, _, err = run_cli(capsys, "jobs", "list")
    assert code == 2 and "env.db" in err
    (tmp_path / "pyproject.toml").write_text("[tool.elastico\n")
    monkeypatch.delenv("ELASTICO_STATE_URL")
    code, _, err = run_cli(capsys, "jobs", "list")
    assert code == 2 and "pyproject.toml" in err and err.count("\n") == 1


def test_this_repository_names_its_state() -> None:
    from elastico_core.cli.project import resolve_state

    setting = resolve_state(None, env={}, start=REPO / "docs")
    assert setting.url == f"sqlite:///{REPO / '.elastico/state.db'}" and "pyproject.toml" in setting.source
