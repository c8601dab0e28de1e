"""Migrations: the shipped revisions create exactly the models, run idempotently and concurrently, downgrade."""

from __future__ import annotations

import multiprocessing

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from elastico_core.state import SchemaMismatch, StateStore, migrate, upgrade_state
from elastico_core.state.db import make_engine
from elastico_core.state.models import Base


def test_upgrade_creates_the_models_schema(state_url: str) -> None:
    assert upgrade_state(state_url) == migrate.head()
    engine = make_engine(state_url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": migrate.VERSION_TABLE, "compare_type": True})
            assert compare_metadata(ctx, Base.metadata) == []
        assert upgrade_state(state_url) == migrate.head()  # idempotent
    finally:
        engine.dispose()


def test_schema_mismatch_is_reported_not_guessed(state_url: str) -> None:
    with pytest.raises(SchemaMismatch, match="elastico state upgrade"):
        StateStore.open(state_url, upgrade=False)
    StateStore.open(state_url).close()
    StateStore.open(state_url, upgrade=False).close()


def test_downgrade_then_upgrade(state_url: str) -> None:
    store = StateStore.open(state_url)
    try:
        assert migrate.downgrade(store.engine, "base") is None
        assert migrate.upgrade(store.engine) == migrate.head()
    finally:
        store.close()


def _upgrade(url: str) -> str:
    return upgrade_state(url)


def test_concurrent_upgrades_all_succeed(state_url: str) -> None:
    """Three processes start at once on a new database (a controller and two Airflow workers)."""
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        revisions = pool.map(_upgrade, [state_url] * 3)
    assert revisions == [migrate.head()] * 3
    engine = make_engine(state_url)
    try:
        assert migrate.current(engine) == migrate.head()
    finally:
        engine.dispose()
