"""MLflow lineage of measurements: every sweep and co-location run is an MLflow run.

The run carries params (workload, knob grid, hardware signature, windows), per-configuration and
summary metrics, and the measured rows as a parquet artifact and as an MLflow dataset input
(``mlflow.data.from_polars`` + ``mlflow.log_input``); the profile store keeps the run id per row.
Embedded default: ``sqlite:///.elastico/mlflow.db`` with artifacts in ``.elastico/mlartifacts``
(relative to the working directory); ``MLFLOW_TRACKING_URI`` switches to a server. This is the only
profiling module that imports mlflow, and it does so lazily: without mlflow the profiler still runs
(run ids stay empty).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import math
import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import polars as pl

EMBEDDED_DIR = Path(".elastico")
PROFILES_EXPERIMENT = "elastico-profiles"
COLOCATION_EXPERIMENT = "elastico-colocation"


class LineageRun(Protocol):
    id: str

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...

    def log_frame(self, frame: pl.DataFrame, path: Path, name: str, context: str) -> None: ...


class Lineage(Protocol):
    def run(
        self, experiment: str, name: str, params: Mapping[str, object]
    ) -> contextlib.AbstractContextManager[LineageRun]: ...


@dataclass
class _NullRun:
    id: str = ""

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        pass

    def log_frame(self, frame: pl.DataFrame, path: Path, name: str, context: str) -> None:
        pass


class NoLineage:
    """Lineage switched off (``--no-mlflow``) or unavailable (mlflow not installed)."""

    @contextlib.contextmanager
    def run(self, experiment: str, name: str, params: Mapping[str, object]) -> Iterator[LineageRun]:
        yield _NullRun()


def tracking_uri(cwd: Path | None = None) -> str:
    """``$MLFLOW_TRACKING_URI``, else the embedded SQLite store under ``.elastico/``."""
    env = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if env:
        return env
    root = (cwd or Path.cwd()) / EMBEDDED_DIR
    return f"sqlite:///{(root / 'mlflow.db').resolve()}"


def _param(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text[:6000]


@dataclass
class _MlflowRun:
    id: str
    mlflow: Any

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        clean = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
        if clean:
            self.mlflow.log_metrics(clean, step=step)

    def log_frame(self, frame: pl.DataFrame, path: Path, name: str, context: str) -> None:
        """The rows as an artifact (parquet) and as a dataset input of the run."""
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.write_parquet(path)
        self.mlflow.log_artifact(str(path), "data")
        import mlflow.data

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "source can be interpreted in multiple ways" for file paths
            uri = self.mlflow.get_artifact_uri(f"data/{path.name}")
            ds = mlflow.data.from_polars(frame, source=uri, name=name)  # type: ignore[attr-defined]
        self.mlflow.log_input(ds, context=context)


class MlflowLineage:
    """Runs in MLflow; experiments are created on first use (with the embedded artifact folder)."""

    def __init__(self, cwd: Path | None = None) -> None:
        import mlflow

        for noisy in ("mlflow", "alembic"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        self.mlflow = mlflow
        self.cwd = cwd or Path.cwd()
        self.uri = tracking_uri(self.cwd)
        self.embedded = not os.environ.get("MLFLOW_TRACKING_URI", "").strip()
        if self.embedded:
            (self.cwd / EMBEDDED_DIR).mkdir(parents=True, exist_ok=True)
        mlflow.set_tracking_uri(self.uri)

    def _experiment(self, name: str) -> str:
        client = self.mlflow.tracking.MlflowClient(self.uri)
        exp = client.get_experiment_by_name(name)
        if exp is not None:
            return str(exp.experiment_id)
        location = (self.cwd / EMBEDDED_DIR / "mlartifacts").resolve().as_uri() if self.embedded else None
        # tagged so MLflow 3's UI opens it on its runs ("Model training" view)
        return str(client.create_experiment(name, artifact_location=location,
                                            tags={"mlflow.experimentKind": "custom_model_development"}))

    @contextlib.contextmanager
    def run(self, experiment: str, name: str, params: Mapping[str, object]) -> Iterator[LineageRun]:
        exp_id = self._experiment(experiment)
        with self.mlflow.start_run(experiment_id=exp_id, run_name=name) as active:
            self.mlflow.log_params({k: _param(v) for k, v in params.items()})
            yield _MlflowRun(active.info.run_id, self.mlflow)


def open_lineage(enabled: bool = True) -> Lineage:
    if not enabled or importlib.util.find_spec("mlflow") is None:
        return NoLineage()
    return MlflowLineage()
