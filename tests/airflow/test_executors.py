"""The LocalExecutor whose workers start with the task code imported (``elastico_airflow.executors``)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from airflow.executors.local_executor import LocalExecutor

from elastico_airflow.executors import DEFAULT_MODULES, PreloadedLocalExecutor, preload, preload_modules
from tests.airflow.conftest import PLUGINS


def test_it_is_a_local_executor_that_preloads_the_operator_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__ELASTICO__PRELOAD_MODULES", raising=False)
    assert issubclass(PreloadedLocalExecutor, LocalExecutor)
    assert preload_modules() == DEFAULT_MODULES == ("elastico_airflow.operators",)


def test_the_modules_come_from_the_elastico_section(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__ELASTICO__PRELOAD_MODULES", " json , elastico_airflow.hooks ,")
    assert preload_modules() == ("json", "elastico_airflow.hooks")
    monkeypatch.setenv("AIRFLOW__ELASTICO__PRELOAD_MODULES", "")
    assert preload_modules() == ()  # preloading switched off


def test_a_module_that_fails_to_import_is_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="elastico_airflow.executors"):
        assert preload(("no_such_module_anywhere", "json")) == ["json"]
    assert "not preloaded: no_such_module_anywhere (ModuleNotFoundError" in caplog.text


def test_a_fresh_process_gets_the_kubernetes_clients_from_the_preload() -> None:
    """What the workers inherit: after ``preload`` the operator, KPO and both Kubernetes clients are imported."""
    code = (
        "import sys\n"
        "from elastico_airflow.executors import preload, DEFAULT_MODULES\n"
        "assert 'kubernetes.client' not in sys.modules\n"
        "print(preload(DEFAULT_MODULES))\n"
        "print(all(m in sys.modules for m in ('kubernetes.client', 'kubernetes_asyncio.client',"
        " 'airflow.providers.cncf.kubernetes.operators.pod', 'elastico_airflow.operators')))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGINS), str(PLUGINS.parent)])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True, env=env)
    assert out.stdout.split() == ["['elastico_airflow.operators']", "True"]
