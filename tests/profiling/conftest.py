"""Fixtures for the profiler tests: a scratch working directory, a private MLflow store (the tiny model is the session's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_uri: str) -> Iterator[Path]:
    """CWD in a temp folder (so .elastico/ lands there) and MLflow pointed at the session's store."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    for name in ("ELASTICO_PROFILES", "ELASTICO_KNOBS", "ELASTICO_WORKLOAD", "ELASTICO_SCALE"):
        monkeypatch.delenv(name, raising=False)
    yield tmp_path
