"""``probe`` on both backends: an empty database (a fresh PostgreSQL schema, a missing SQLite file) is no
state for a read and a place to create one for a write; after ``state upgrade`` reads work, read-only."""

from __future__ import annotations

import pytest

from tests.cli_runner import run_cli


def test_reads_need_a_state_and_find_one_after_upgrade(state_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from elastico_core.state.probe import Found, probe

    assert probe(state_url).found is Found.MISSING
    code, _, err = run_cli(capsys, "jobs", "list", "--state", state_url)
    assert code == 2 and "no ElastiCo state" in err and "elastico state upgrade" in err and err.count("\n") == 1
    assert probe(state_url).found is Found.MISSING, "the read created nothing"
    code, out, _ = run_cli(capsys, "state", "upgrade", "--state", state_url)
    assert code == 0 and "created at schema revision" in out
    found = probe(state_url)
    assert found.found is Found.ELASTICO and found.revision
    code, out, _ = run_cli(capsys, "jobs", "list", "--json", "--state", state_url)
    assert code == 0 and out.strip() == "[]"
    code, out, _ = run_cli(capsys, "state", "current", "--state", state_url)
    assert code == 0 and f"at {found.revision}" in " ".join(out.split())  # (the console may wrap a long path)
    assert "***" in found.where or "pass" not in found.where  # a password never shows


@pytest.mark.postgres
def test_a_shared_postgres_database_is_a_place_for_a_state(pg_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Airflow's or MLflow's tables beside: no state for a read (it names the tables), fine for a write."""
    import sqlalchemy as sa

    from elastico_core.state.db import make_engine

    engine = make_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE dag_run (id integer)"))
    engine.dispose()
    code, _, err = run_cli(capsys, "jobs", "list", "--state", pg_url)
    assert code == 2 and "no ElastiCo state in" in err and "dag_run" in err
    assert run_cli(capsys, "state", "upgrade", "--state", pg_url)[0] == 0
    assert run_cli(capsys, "jobs", "list", "--json", "--state", pg_url)[0] == 0
