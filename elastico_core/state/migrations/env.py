"""Alembic environment of the planner state: online on a given connection (or URL), offline as SQL text."""

from __future__ import annotations

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from elastico_core.state.migrate import VERSION_TABLE
from elastico_core.state.models import Base

# Any constant: it names the PostgreSQL advisory lock concurrent upgrades queue on.
MIGRATION_LOCK_KEY = 0x454C5354

config = context.config
target_metadata = Base.metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        transactional_ddl=True,  # SQLite and PostgreSQL both roll DDL back: a failed upgrade leaves nothing half-done
    )


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        from elastico_core.state.db import make_engine

        engine = make_engine(config.get_main_option("sqlalchemy.url") or "")
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
        engine.dispose()
    else:
        _run(connection)


def _run(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        context.run_migrations()


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
