"""Alembic migrations shipped inside the package, run programmatically (on startup, or ``elastico state upgrade``).

The version table is ``elastico_alembic_version`` (not Alembic's default), so the state can live in the
same PostgreSQL database as Airflow's or MLflow's metadata, which both use ``alembic_version``.
Concurrent upgrades are safe: PostgreSQL takes an advisory lock inside the migration transaction (see
``migrations/env.py``), SQLite's ``BEGIN IMMEDIATE`` serializes them; the loser then finds nothing to do.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

from elastico_core.state.errors import SchemaMismatch

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
VERSION_TABLE = "elastico_alembic_version"


def alembic_config(engine: Engine | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if engine is not None:
        cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return cfg


def head() -> str:
    rev = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert rev is not None
    return rev


def current(engine: Engine) -> str | None:
    """The revision the database is at (None: not initialised)."""
    from elastico_core.state.db import READONLY

    with engine.connect().execution_options(**{READONLY: True}) as conn:
        return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> str:
    """Migrate to ``revision``; a no-op (no Alembic environment loaded) when already at head."""
    if revision == "head" and current(engine) == head():
        return head()
    cfg = alembic_config(engine)
    with engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        conn.commit()
    return current(engine) or ""


def downgrade(engine: Engine, revision: str) -> str | None:
    cfg = alembic_config(engine)
    with engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)
        conn.commit()
    return current(engine)


def check(engine: Engine) -> None:
    """Raise ``SchemaMismatch`` unless the database is at this version's head revision."""
    at, want = current(engine), head()
    if at != want:
        state = "not initialised" if at is None else f"at schema revision {at}"
        raise SchemaMismatch(f"the state database is {state}; this ElastiCo needs {want}: run `elastico state upgrade`")
