"""Engines and transactions: SQLite with WAL, busy timeouts and ``BEGIN IMMEDIATE``; PostgreSQL with row locks.

Every write goes through ``StateStore.write(fn)``: ``fn`` runs inside one transaction and is retried
(from the start, on a fresh transaction) when the database reports a deadlock, a serialization failure
or a busy SQLite file, so callers write plain read-check-write code and never see a half-applied change.

Why ``BEGIN IMMEDIATE`` on SQLite: a deferred transaction that reads and then writes can fail with
"database is locked" at its first write, after it already decided on stale reads. Taking the write lock
at ``BEGIN`` serializes writers up front, which is what ``SELECT ... FOR UPDATE`` gives on PostgreSQL.
Reads (``StateStore.read``) use a deferred ``BEGIN`` and, under WAL, never block writers.

Healing: a connection that failed because the state was read-only or unreachable is not trusted again.
The pool is drained on such an error (``engine.dispose``) and checked before use (``pool_pre_ping``), so
the next transaction runs on a fresh connection: a SQLite file opened while it was immutable stays
read-only for that connection's life, and a PostgreSQL session opened while ``default_transaction_read_only``
was on keeps it — kept in the pool, either failed "read-only" for as long as the process ran.
A ``StateStore`` never creates a SQLite file after it opened one (``mode=rw``): a deleted file is an error
to report (``state.identity``), not an empty new state to plan into.
"""

from __future__ import annotations

import logging
import os
import random
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from elastico_core.state.errors import SchemaMismatch, StateError, StateUnavailable
from elastico_core.state.url import normalize_state_url, redact_url, redacted

log = logging.getLogger("elastico.state")

T = TypeVar("T")
S = TypeVar("S", bound="sa.Select[*tuple[Any, ...]]")
SQLITE_BUSY_TIMEOUT_MS = 30_000
READONLY = "elastico_readonly"
RETRYABLE_PG_CODES = ("40001", "40P01", "55P03")  # serialization failure, deadlock, lock not available
READ_ONLY_PG_CODE = "25006"  # read_only_sql_transaction: a hot standby, or default_transaction_read_only
# SQLite messages of a file the process cannot write or open at all
SQLITE_UNAVAILABLE = ("readonly database", "unable to open database", "disk i/o error", "disk is full")


def make_engine(url: URL | str, *, pool_size: int = 5, create: bool = True) -> Engine:
    """An engine for a state URL, with the per-backend settings the guarantees rely on.

    :param create: whether connecting may create a missing SQLite file (``StateStore`` allows it only while
        it runs the migrations of ``open(upgrade=True)``).
    """
    parsed = normalize_state_url(url) if isinstance(url, str) else url
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        plain_file = bool(database) and database != ":memory:" and not database.startswith("file:")
        if plain_file and create:
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, pool_pre_ping=True)
        # a read-only file is never switched to WAL
        _sqlite_events(engine, never_create=plain_file and not create, wal=parsed.query.get("mode") != "ro")
        return engine
    # values_plus_batch: bulk UPDATEs go out in pages (psycopg2's execute_batch), not one round trip per row
    return sa.create_engine(parsed, pool_pre_ping=True, pool_size=pool_size, max_overflow=pool_size,
                            executemany_mode="values_plus_batch")


def _sqlite_events(engine: Engine, *, never_create: bool = False, wal: bool = True) -> None:
    if never_create:
        @event.listens_for(engine, "do_connect")
        def _no_create(_dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
            # the same file, opened as a URI with mode=rw: a missing file is an error, never a new database
            path = urllib.parse.quote(os.path.abspath(str(cargs[0])), safe="/")
            cargs[0] = f"file:{path}?mode=rw"
            cparams["uri"] = True

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (pysqlite's implicit BEGIN is deferred)
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        if wal:
            _set_wal(cur)
        cur.execute("PRAGMA synchronous = NORMAL")  # durable at WAL checkpoints; no fsync per commit
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        readonly = conn.get_execution_options().get(READONLY, False)
        conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")


def _set_wal(cur: Any) -> None:
    """Switch to WAL; a new file being switched by another process at the same moment answers "locked"."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except Exception as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02 + random.random() * 0.05)


def is_retryable(exc: BaseException) -> bool:
    """Deadlocks, serialization failures and a busy SQLite file: worth a fresh transaction."""
    if isinstance(exc, OperationalError) and "database is locked" in str(exc.orig):
        return True
    if isinstance(exc, DBAPIError):
        code = getattr(exc.orig, "pgcode", None)
        return code in RETRYABLE_PG_CODES
    return False


def unavailable_reason(exc: BaseException) -> str | None:
    """Why the state cannot be used now (read-only, unreachable), or None for any other error.

    Constraint violations and retryable conflicts are not "unavailable": callers handle those.
    """
    if not isinstance(exc, DBAPIError) or is_retryable(exc):
        return None
    first = (str(exc.orig).strip().splitlines() or [type(exc.orig).__name__])[0]
    pgcode = getattr(exc.orig, "pgcode", None)
    if pgcode == READ_ONLY_PG_CODE or any(m in first.lower() for m in ("read-only", "readonly")):
        return f"read-only ({redact_url(first)[:200]})"
    if not isinstance(exc, OperationalError):
        return None
    if hasattr(exc.orig, "sqlite_errorcode"):  # SQLite: only a file it cannot open or write (not a SQL error)
        return f"unusable ({first[:200]})" if any(m in first.lower() for m in SQLITE_UNAVAILABLE) else None
    if exc.connection_invalidated or pgcode is None or str(pgcode).startswith(("08", "57P")):
        return f"unreachable ({redact_url(first)[:200]})"
    return None


def unavailable(exc: BaseException, url: URL | str) -> StateUnavailable | None:
    """A one-line ``StateUnavailable`` for a driver error that means the state cannot be used now."""
    why = unavailable_reason(exc)
    return None if why is None else StateUnavailable(f"state {redacted(url)} is {why}")


def _missing_sqlite_file(url: URL) -> bool:
    database = url.database or ""
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:" or database.startswith("file:"):
        return False
    return not Path(database).exists()


@dataclass
class StateStore:
    """The planner state's database: an engine plus the transaction discipline above."""

    engine: Engine
    retries: int = 8

    @classmethod
    def open(cls, url: str | URL | None = None, *, upgrade: bool = True) -> StateStore:
        """Open (and by default migrate to the newest schema) the state at ``url`` (None: the default file).

        With ``upgrade=False`` a database at another schema revision raises ``SchemaMismatch``.
        """
        from elastico_core.state import migrate

        parsed = normalize_state_url(url) if not isinstance(url, URL) else url
        if not upgrade and _missing_sqlite_file(parsed):
            raise SchemaMismatch(f"the state database {redacted(parsed)} is not initialised (no such file): "
                                 "run `elastico state upgrade`")  # fmt: skip
        engine = make_engine(parsed, create=upgrade)
        try:
            if upgrade:
                migrate.upgrade(engine)
                engine.dispose()
                engine = make_engine(parsed, create=False)  # from now on the file is never re-created
            else:
                migrate.check(engine)
        except BaseException as exc:
            engine.dispose()
            if (err := unavailable(exc, parsed)) is not None:
                raise err from None
            raise
        return cls(engine)

    @property
    def url(self) -> str:
        return redacted(self.engine.url)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in a read-only transaction (a consistent snapshot on PostgreSQL's REPEATABLE READ)."""
        opts: dict[str, Any] = {READONLY: True}
        if self.dialect == "postgresql":
            opts["isolation_level"] = "REPEATABLE READ"
        try:
            with self.engine.connect().execution_options(**opts) as conn, conn.begin():
                return fn(conn)
        except DBAPIError as exc:
            if (err := unavailable(exc, self.engine.url)) is not None:
                self.engine.dispose()  # no pooled connection from the bad spell is used again
                raise err from None
            raise

    def write(self, fn: Callable[[Connection], T], *, retries: int | None = None) -> T:
        """Run ``fn`` in one write transaction; retried from the start on deadlock/serialization/busy."""
        attempts = self.retries if retries is None else retries
        for attempt in range(attempts + 1):
            try:
                with self.engine.begin() as conn:
                    return fn(conn)
            except DBAPIError as exc:
                if (err := unavailable(exc, self.engine.url)) is not None:
                    self.engine.dispose()  # no pooled connection from the bad spell is used again
                    raise err from None
                if attempt >= attempts or not is_retryable(exc):
                    raise
                delay = min(1.0, 0.02 * 2**attempt) * (0.5 + random.random())
                log.debug("retrying a state transaction after %s (attempt %d)", type(exc.orig).__name__, attempt + 1)
                time.sleep(delay)
        raise StateError("unreachable: transaction retries exhausted")  # pragma: no cover

    def for_update(self, stmt: S) -> S:
        """``SELECT ... FOR UPDATE`` where the backend has row locks (SQLite's BEGIN IMMEDIATE already serializes)."""
        return stmt.with_for_update() if self.dialect == "postgresql" else stmt

    def close(self) -> None:
        self.engine.dispose()
