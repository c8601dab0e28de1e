"""Fixtures of the state tests: every ``state_url`` test runs on SQLite and on PostgreSQL.

PostgreSQL comes from ``$ELASTICO_TEST_PG_URL`` (default: the CI database
``postgresql+psycopg2://elastico:elastico@127.0.0.1:5432/elastico``); each test gets its own schema,
dropped afterwards. Without a reachable server the PostgreSQL cases skip, saying why.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from state_helpers import pg_base_url, pg_schema_url, pg_unavailable_reason

from elastico_core.state import JobService

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
        return
    yield from _pg_schema()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema (PostgreSQL-only tests)."""
    yield from _pg_schema()


def _pg_schema() -> Iterator[str]:
    reason = pg_unavailable_reason()
    if reason:
        pytest.skip(reason)
    import sqlalchemy as sa

    schema = f"t_{uuid.uuid4().hex[:12]}"
    def admin(sql: str) -> None:  # a short-lived engine: tests fork processes, which must not share its sockets
        engine = sa.create_engine(pg_base_url())
        with engine.begin() as conn:
            conn.exec_driver_sql(sql)
        engine.dispose()

    admin(f'CREATE SCHEMA "{schema}"')
    try:
        yield pg_schema_url(schema)
    finally:
        admin(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def profiles_dir(tmp_path: Path) -> Path:
    """A private copy of the shipped profile store (the controller writes measured rows into it)."""
    out = tmp_path / "profiles"
    out.mkdir()
    for f in (REPO / "profiles").glob("*.parquet"):
        shutil.copy(f, out / f.name)
    return out


@pytest.fixture
def service(state_url: str) -> Iterator[JobService]:
    """A job service on the test's state, closed afterwards."""
    s = JobService.open(state_url)
    yield s
    s.close()
