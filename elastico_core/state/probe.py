"""What a state URL points at, found without creating or changing anything: the door of every read.

A command that only reads must never create a database, migrate one, or turn a YAML file into SQLite.
``probe`` looks before anything opens the URL for writing: a SQLite path is checked on disk (does it
exist, is it a regular file) and opened by SQLite read-only (``mode=ro``) to list its tables — never by a
plain ``open()``, whose ``close()`` would drop the POSIX locks of this process's other SQLite connections
to the same file; a PostgreSQL database is asked for its tables in a read-only transaction. An ElastiCo
state is recognised by its Alembic version table (``elastico_alembic_version``) and its ``elastico_*``
tables.

``require_state`` gives the probe of an existing ElastiCo state (``read_only_url`` then opens it for
reading only: SQLite ``mode=ro``, so not even a checkpoint can write), or raises ``NoState`` — one line
naming the path and what to do; ``writable_target`` refuses only what belongs to something else.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from sqlalchemy.engine import URL

from elastico_core.state.errors import StateError
from elastico_core.state.migrate import VERSION_TABLE
from elastico_core.state.url import normalize_state_url, redacted

CREATE_HINT = "create it with `elastico state upgrade`"
_PREFIX = "elastico_"


class NoState(StateError):
    """The URL names no ElastiCo state: nothing there, or something else (a YAML file, MLflow's database)."""


class Found(StrEnum):
    MISSING = "missing"  # no file (SQLite) / no ElastiCo tables in the database (PostgreSQL)
    EMPTY = "empty"  # a zero-length file or a SQLite database without tables: nobody's data
    NOT_SQLITE = "not-sqlite"  # a file of another kind (YAML, text, ...)
    FOREIGN = "foreign"  # a database of another application (MLflow's, Airflow's, ...)
    PARTIAL = "partial"  # elastico_* tables without the version table: a broken or foreign state
    ELASTICO = "elastico"


@dataclass(frozen=True, slots=True)
class Probe:
    """What is at a state URL. ``where`` is how to name it to a person (a path, or the redacted URL)."""

    url: URL
    found: Found
    where: str
    revision: str | None = None
    tables: tuple[str, ...] = ()
    detail: str = ""

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_backend_name() == "sqlite"

    def refusal(self) -> str | None:
        """Why this is not a state a command may write into (None: an ElastiCo state, or nothing yet)."""
        if self.found is Found.NOT_SQLITE:
            return f"{self.where} is not an ElastiCo state ({self.detail}); left untouched"
        if self.found is Found.FOREIGN and self.is_sqlite:
            return (f"{self.where} is a SQLite database of another application (tables {_few(self.tables)}), "
                    "not an ElastiCo state; left untouched")
        if self.found is Found.PARTIAL:
            return (f"{self.where} holds ElastiCo tables ({_few(self.tables)}) but no schema version: "
                    "not a state this version can use; left untouched")
        return None

    def missing_line(self) -> str:
        """The one line a read command prints when there is no ElastiCo state here."""
        if self.found is Found.FOREIGN:  # PostgreSQL: a shared database without ElastiCo's tables
            return f"no ElastiCo state in {self.where} (its tables: {_few(self.tables)}); {CREATE_HINT}"
        what = "an empty database" if self.found is Found.EMPTY else "nothing"
        return f"no ElastiCo state at {self.where} ({what} there); {CREATE_HINT}"


def _few(tables: tuple[str, ...], n: int = 4) -> str:
    shown = ", ".join(tables[:n])
    return shown + (f", … ({len(tables)} in all)" if len(tables) > n else "")


def display(url: URL) -> str:
    """A state as a person reads it: a SQLite file's path (relative when under the working directory)."""
    if url.get_backend_name() != "sqlite":
        return redacted(url)
    database = url.database or ""
    if not database or database == ":memory:" or database.startswith("file:"):
        return redacted(url)
    path = Path(database)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def probe(value: str | URL | None) -> Probe:
    """What ``value`` (a state URL or SQLite path; None: the built-in default) points at. Writes nothing."""
    url = value if isinstance(value, URL) else normalize_state_url(value)
    if url.get_backend_name() == "sqlite":
        return _probe_sqlite(url)
    return _probe_server(url)


def _classify(url: URL, where: str, tables: list[str], revision: str | None) -> Probe:
    ours = tuple(sorted(t for t in tables if t.startswith(_PREFIX)))
    others = tuple(sorted(t for t in tables if not t.startswith(_PREFIX)))
    if VERSION_TABLE in ours:
        return Probe(url, Found.ELASTICO, where, revision, ours)
    if ours:
        return Probe(url, Found.PARTIAL, where, None, ours)
    if others:
        return Probe(url, Found.FOREIGN, where, None, others)
    return Probe(url, Found.EMPTY, where)


def _probe_sqlite(url: URL) -> Probe:
    database = url.database or ""
    where = display(url)
    if not database or database == ":memory:" or database.startswith("file:"):
        return Probe(url, Found.ELASTICO if database else Found.MISSING, where)  # in-memory/URI forms: the caller's own
    path = Path(database)
    if not path.exists():
        return Probe(url, Found.MISSING, where)
    if not path.is_file():
        return Probe(url, Found.NOT_SQLITE, where, detail="a directory" if path.is_dir() else "not a regular file")
    if path.stat().st_size == 0:
        return Probe(url, Found.EMPTY, where, detail="an empty file")
    # Only SQLite opens the file: a plain open() and close() of a database file drops every POSIX lock this
    # process holds on it — those of its other SQLite connections too (a controller's, beside its MLflow
    # follower), which then read stale snapshots. A file SQLite rejects is nobody's database: read its head.
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            revision = None
            if VERSION_TABLE in tables:
                row = conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()
                revision = str(row[0]) if row else None
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        if "not a database" not in str(exc):
            raise StateError(f"cannot read {where}: {exc}") from None
        return Probe(url, Found.NOT_SQLITE, where, detail=_kind_of(path))
    return _classify(url, where, tables, revision)


def _kind_of(path: Path) -> str:
    """What a file SQLite rejected looks like (read only after SQLite said it is no database)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return "not a SQLite database"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return "not a SQLite database"
    return "a text file"


def _probe_server(url: URL) -> Probe:
    import sqlalchemy as sa

    from elastico_core.state.db import make_engine, unavailable

    where = redacted(url)
    engine = make_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            tables = sa.inspect(conn).get_table_names()
            revision = None
            if VERSION_TABLE in tables:
                revision = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
            conn.rollback()
    except Exception as exc:
        if (err := unavailable(exc, url)) is not None:
            raise err from None
        raise
    finally:
        engine.dispose()
    found = _classify(url, where, tables, None if revision is None else str(revision))
    if found.found is Found.EMPTY:  # a database with no tables at all: nothing of ElastiCo's there yet
        return Probe(url, Found.MISSING, where)
    return found


def read_only_url(url: URL) -> URL:
    """The URL a reader connects with: SQLite ``mode=ro`` (no write, no checkpoint, no file created)."""
    if url.get_backend_name() != "sqlite" or not url.database or url.database.startswith("file:"):
        return url
    uri = Path(url.database).absolute().as_uri()
    return url.set(database=uri, query={**url.query, "mode": "ro", "uri": "true"})


def require_state(value: str | URL | None) -> Probe:
    """The probe of an existing ElastiCo state, else ``NoState`` (one line, the file untouched)."""
    found = probe(value)
    if found.found is Found.ELASTICO:
        return found
    refusal = found.refusal()
    raise NoState(refusal or found.missing_line())


def writable_target(value: str | URL | None) -> Probe:
    """The probe of a URL a command may create or migrate a state at (missing, empty, or ElastiCo's);
    ``NoState`` for a file or database that belongs to something else (left untouched)."""
    found = probe(value)
    refusal = found.refusal()
    if refusal is not None:
        raise NoState(refusal)
    return found
