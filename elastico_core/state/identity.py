"""Which state a process is talking to: a random id written when the state is created, and the SQLite file's inode.

Why: a SQLite state deleted while the controller runs is not gone for the controller — its open
connections keep the unlinked file alive, it goes on planning into it, and every other process (a
``jobs submit``, the Airflow workers) meanwhile creates and uses a new, empty file under the same name.
Two states, each looking healthy: a silent split brain. With an identity the controller can tell:

* the file at the path is no longer the one it opened (another inode, or none) → ``StateUnavailable``
  ("deleted" / "replaced"), logged and retried with backoff, nothing planned;
* the database at the URL carries another id than the one it started with (re-created, restored from
  another installation, a PostgreSQL database dropped and created again) → ``StateReplaced``, likewise;
* the same id under a new inode (restored from a backup, moved back) → adopted after the pool is
  drained, so no connection to the old file survives.

The id lives in ``elastico_identity`` (one row, written by migration 0003 and so by every
``elastico state upgrade``). ``read_identity`` and ``check_identity`` are all a caller needs; they read one
row and stat one file, so checking every epoch costs well under a millisecond on SQLite.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection

from elastico_core.state.db import StateStore
from elastico_core.state.errors import StateUnavailable
from elastico_core.state.models import Identity

FileId = tuple[int, int]  # (st_dev, st_ino)


class StateReplaced(StateUnavailable):
    """The database at the state URL is another state than the one this process started with."""


@dataclass(frozen=True, slots=True)
class StateIdentity:
    """What identifies one state: its random id, and for a SQLite file the file it lives in."""

    state_id: str
    file: FileId | None = None  # None on PostgreSQL (and for an in-memory SQLite database)

    def short(self) -> str:
        return self.state_id[:8]


def sqlite_file(url: URL) -> Path | None:
    """The file a SQLite URL names (None for PostgreSQL, ``:memory:`` and ``file:`` URIs' special forms)."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database or ""
    if not database or database == ":memory:" or url.query.get("mode") == "memory":
        return None
    if database.startswith("file:"):
        database = database.removeprefix("file:").split("?", 1)[0]
    return Path(os.path.abspath(database))


def _file_id(store: StateStore) -> FileId | None:
    path = sqlite_file(store.engine.url)
    if path is None:
        return None
    try:
        st = path.stat()
    except FileNotFoundError:
        raise StateUnavailable(f"state {store.url} was deleted: no file at {path} (restore it, or restart on a new state)") from None
    except OSError as exc:
        raise StateUnavailable(f"state {store.url} is unusable ({exc.strerror or type(exc).__name__})") from None
    return (st.st_dev, st.st_ino)


def _state_id(conn: Connection) -> str | None:
    return conn.execute(sa.select(Identity.state_id).where(Identity.id == 1)).scalar_one_or_none()


def read_identity(store: StateStore) -> StateIdentity:
    """The identity of the state ``store`` is connected to now.

    :raises StateUnavailable: the SQLite file is gone or the database cannot be read, or it holds no identity
        (a state from before schema revision 0003 that was not upgraded).
    """
    before = _file_id(store)
    state_id = store.read(_state_id)
    if state_id is None:
        raise StateUnavailable(f"state {store.url} has no identity row: run `elastico state upgrade`")
    return StateIdentity(state_id, before)


def check_identity(store: StateStore, expected: StateIdentity) -> StateIdentity:
    """``expected`` when the store still reaches the same state (see the module doc), else raise.

    A SQLite state whose file is unchanged is the same state (one ``stat``). When the file changed under
    the same path, the engine's pool is drained first (its connections may point at the old file) and the
    id is read over a fresh connection; on PostgreSQL the id is read every time (one indexed row).

    :raises StateUnavailable: the SQLite file was deleted, or replaced by one without an identity.
    :raises StateReplaced: the database at the URL is another state.
    """
    now = _file_id(store)
    if expected.file is not None:
        if now == expected.file:
            return expected
        store.engine.dispose()  # every pooled connection may hold the old, unlinked file open
    state_id = store.read(_state_id)
    if state_id != expected.state_id:
        what = "has no identity" if state_id is None else f"is state {state_id[:8]}"
        raise StateReplaced(
            f"state {store.url} was replaced: the file there now {what}, not state {expected.short()} this "
            "process started with; nothing is planned against it (restart the controller to adopt it)"
        )
    return StateIdentity(expected.state_id, now)
