"""How the command line opens the planner state: a read never writes, a write never lands in someone else's file.

* ``open_reader``: an existing ElastiCo state, opened read-only (SQLite ``mode=ro``), never migrated; else one
  line — ``no ElastiCo state at …; create it with `elastico state upgrade``` — and the file is left as it was.
* ``open_writer``: a state a command may write to; with ``create`` a missing one is created (and said so on
  stderr), a YAML file or another application's database is refused untouched.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from elastico_core.cli.project import resolve_state
from elastico_core.state.errors import SchemaMismatch
from elastico_core.state.probe import Found, NoState, Probe, read_only_url, require_state, writable_target

if TYPE_CHECKING:
    from elastico_core.state import JobService, StateStore


def open_read_store(flag: str | None) -> tuple[StateStore, Probe]:
    """The store of an existing ElastiCo state at this version's schema, read-only."""
    from elastico_core.state import StateStore

    found = require_state(resolve_state(flag).url)
    try:
        store = StateStore.open(read_only_url(found.url), upgrade=False)
    except SchemaMismatch as exc:
        raise SchemaMismatch(f"{found.where}: {exc}") from None
    return store, found


def open_reader(flag: str | None) -> tuple[JobService, Probe]:
    """A ``JobService`` that can only read (see the module docstring); the caller closes it."""
    from elastico_core.state import JobService

    store, found = open_read_store(flag)
    return JobService(store), found


def open_write_store(flag: str | None, *, create: bool) -> tuple[StateStore, Probe]:
    """The store of a state a command writes to, migrated to this version's schema (created if ``create``)."""
    from elastico_core.state import StateStore

    found = writable_target(resolve_state(flag).url)
    fresh = found.found in (Found.MISSING, Found.EMPTY)
    if fresh and not create:
        raise NoState(found.missing_line())
    store = StateStore.open(found.url, upgrade=True)
    if fresh:
        print(f"note: created an ElastiCo state at {found.where}", file=sys.stderr)
    return store, found


def open_writer(flag: str | None, *, create: bool = False) -> tuple[JobService, Probe]:
    from elastico_core.state import JobService

    store, found = open_write_store(flag, create=create)
    return JobService(store), found
