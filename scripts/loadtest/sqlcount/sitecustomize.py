"""Count SQL statements per database in every Python process the load test starts (it is on their PYTHONPATH).

Each process counts the statements its SQLAlchemy engines execute, per database (the ElastiCo state and
Airflow's metadata database, told apart by the URL's database name; ``<database>#select`` counts the reads), and writes the totals to
``$ELASTICO_SQLCOUNT_DIR/<pid>.json`` every two seconds and at exit; the load test sums the files. A
listener on the ``Engine`` class costs a dictionary increment per statement. Processes that never load
SQLAlchemy (the workloads) write nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time

_DIR = os.environ.get("ELASTICO_SQLCOUNT_DIR", "")
_counts: dict[str, int] = {}
_lock = threading.Lock()


def _flush() -> None:
    if not _counts:
        return
    path = os.path.join(_DIR, f"{os.getpid()}.json")
    with _lock:
        data = {"pid": os.getpid(), "argv": " ".join(sys.argv[:3])[:200], "t": time.time(), "counts": dict(_counts)}
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _loop() -> None:
    while True:
        time.sleep(2.0)
        with contextlib.suppress(Exception):  # a full disk must not break the process under test
            _flush()


def _start_thread() -> None:
    threading.Thread(target=_loop, name="sqlcount", daemon=True).start()


def _install() -> None:
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def count(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        name = conn.engine.url.database or "?"
        key = os.path.basename(name)
        with _lock:
            _counts[key] = _counts.get(key, 0) + 1
            if statement.lstrip()[:6].upper() == "SELECT":  # reads apart: a trigger's polls are its reads
                _counts[key + "#select"] = _counts.get(key + "#select", 0) + 1

    event.listen(Engine, "before_cursor_execute", count)


class _Finder:
    """Install the listener the moment SQLAlchemy's engine module is first imported (no import of our own)."""

    def find_spec(self, name, path=None, target=None):  # type: ignore[no-untyped-def]
        if name == "sqlalchemy.engine":
            sys.meta_path.remove(self)
            import importlib.util

            spec = importlib.util.find_spec(name)
            if spec is not None and spec.loader is not None:
                loader = spec.loader
                exec_module = loader.exec_module

                def run(module):  # type: ignore[no-untyped-def]
                    exec_module(module)
                    _install()
                    _start_thread()
                    os.register_at_fork(after_in_child=_after_fork)

                loader.exec_module = run  # type: ignore[method-assign]
            return spec
        return None


def _after_fork() -> None:
    with _lock:
        _counts.clear()
    _start_thread()


if _DIR:
    sys.meta_path.insert(0, _Finder())
    atexit.register(_flush)
