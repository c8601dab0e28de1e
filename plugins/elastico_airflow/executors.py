"""``PreloadedLocalExecutor``: Airflow's LocalExecutor whose workers start with the task code imported.

Every run of a task is a process forked from a LocalExecutor worker that parses the DAG file again, and a
DAG of ElastiCo jobs imports Airflow's task SDK, ``KubernetesPodOperator`` and both Kubernetes clients:
about a CPU-second per task run, several times the operator's own work (register, launch, read the
outcome). The workers are forked from the scheduler, so whatever the scheduler imported before it starts
them every task run inherits, and parses only the DAG file itself. This executor imports the modules
named in ``[elastico] preload_modules`` (default: the ElastiCo operator, which brings the rest) before the
workers start — what the dag-processor's ``parsing_pre_import_modules`` does for DAG parsing.

Use it by its path: ``AIRFLOW__CORE__EXECUTOR=elastico_airflow.executors.PreloadedLocalExecutor``. A module
that fails to import is logged and skipped: the task then imports it itself, as without this executor.
"""

from __future__ import annotations

import importlib
import logging

from airflow.executors.local_executor import LocalExecutor

DEFAULT_MODULES = ("elastico_airflow.operators",)
log = logging.getLogger(__name__)


def preload_modules() -> tuple[str, ...]:
    """The modules to import before the workers start: ``[elastico] preload_modules`` (comma-separated)."""
    from airflow.configuration import conf

    raw = conf.get("elastico", "preload_modules", fallback=None)
    if raw is None:
        return DEFAULT_MODULES
    return tuple(m.strip() for m in raw.split(",") if m.strip())


def preload(modules: tuple[str, ...]) -> list[str]:
    """Import each module; the names of those that imported."""
    done = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a broken module must not stop the scheduler: the task imports it itself
            log.warning("not preloaded: %s (%s: %s)", name, type(exc).__name__, exc)
            continue
        done.append(name)
    return done


class PreloadedLocalExecutor(LocalExecutor):
    """LocalExecutor with the task modules imported before its workers are forked (module doc)."""

    def start(self) -> None:
        loaded = preload(preload_modules())
        log.info("preloaded for the task runs: %s", ", ".join(loaded) or "nothing")
        super().start()
