"""The one MLflow door of IAC: log and register slowdown models, move the ``champion`` alias, fetch it.

Tracking store: ``MLFLOW_TRACKING_URI`` when set, else the embedded ``sqlite:///.elastico/mlflow.db``
(relative to the working directory). For a SQLite store, artifacts live beside the database in
``mlartifacts/`` (so ``.elastico/mlartifacts`` by default). Runs go to the experiment ``elastico-iac``;
versions are registered under the model ``elastico-iac``.

What a training run records: parameters (model kind and hyper-parameters, folds, seed, row counts),
the grouped-CV metrics (``cv_mape``, ``cv_r2``, ``cv_moderate_mape``, per type), the dataset as an
MLflow dataset input whose digest is the dataset's SHA-256, and the model as a pyfunc whose signature
is the feature schema (``features.FEATURE_NAMES``) with explicit pip requirements. A registered version
carries tags ``model_kind``, ``estimator_params``, ``cv_spec`` (dataset digest, folds, seed, schema) and
``cv_mape``; the alias ``champion`` moves to it only if it beats the current champion on the same CV:
the champion's stored figure when its ``cv_spec`` matches, else the champion's model kind and
parameters re-run through this dataset's folds.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import mlflow
import numpy as np
import pandas as pd
from mlflow.models.signature import ModelSignature
from mlflow.types.schema import ColSpec, Schema

from elastico_core.iac.cf import PairKeys
from elastico_core.iac.dataset import CoLocationDataset
from elastico_core.iac.evaluate import ModelReport, cross_validate, fit_model
from elastico_core.iac.features import FEATURE_NAMES, FEATURE_SCHEMA
from elastico_core.iac.learned import LearnedPredictor
from elastico_core.iac.modelfile import StoredModel, check_schema, load_model, save_model
from elastico_core.iac.models import ModelKind, make_model, uses_keys
from elastico_core.iac.retraining import HOLDOUT_FRACTION, MIN_HOLDOUT, challenge
from elastico_core.model.errors import SpecError

MODEL_NAME = "elastico-iac"
EXPERIMENT = "elastico-iac"
CHAMPION = "champion"
DEFAULT_TRACKING_URI = "sqlite:///.elastico/mlflow.db"
ARTIFACT_DIR = "model"  # the pyfunc artifact holding our own model folder
# MLflow 3's UI opens an experiment with this tag on its runs ("Model training"), not the GenAI overview
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"


def tracking_uri(explicit: str | None = None) -> str:
    """``explicit``, else ``$MLFLOW_TRACKING_URI``, else the embedded SQLite store."""
    return explicit or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (relative paths stay relative), else None."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri.removeprefix("sqlite:///"))


@contextlib.contextmanager
def _quiet_http() -> Iterator[None]:
    """Few retries and short timeouts: an unreachable server must fail fast, not back off for minutes."""
    saved = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "10"
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def reachable(uri: str, timeout_s: float = 2.0) -> tuple[bool, str]:
    """Whether a tracking store answers, cheaply: an HTTP ``/health`` probe, or the SQLite file's presence."""
    db = sqlite_path(uri)
    if db is not None:
        return (True, "") if db.exists() else (False, f"no tracking database at {db}")
    scheme = urlparse(uri).scheme
    if scheme in ("http", "https"):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s) as resp:
                return (resp.status < 500, "" if resp.status < 500 else f"HTTP {resp.status}")
        except Exception as exc:
            return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def _client(uri: str) -> mlflow.MlflowClient:
    db = sqlite_path(uri)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
    return mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)


@contextlib.contextmanager
def _using(uri: str) -> Iterator[mlflow.MlflowClient]:
    """Point MLflow's fluent API at ``uri`` for the block, then restore what the process had."""
    saved_tracking, saved_registry = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    client = _client(uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        yield client
    finally:
        mlflow.set_tracking_uri(saved_tracking)
        mlflow.set_registry_uri(saved_registry)


def _experiment(client: mlflow.MlflowClient, uri: str) -> str:
    exp = client.get_experiment_by_name(EXPERIMENT)
    if exp is not None:
        if exp.tags.get(EXPERIMENT_KIND_TAG) != MODEL_TRAINING:
            client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
        return str(exp.experiment_id)
    db = sqlite_path(uri)
    location = (db.parent.resolve() / "mlartifacts").as_uri() if db is not None else None
    return str(client.create_experiment(EXPERIMENT, artifact_location=location, tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING}))


# ---- the pyfunc -------------------------------------------------------------------------------
class IacPyfunc(mlflow.pyfunc.PythonModel):  # type: ignore[name-defined,misc]
    """MLflow pyfunc: a DataFrame with the ``FEATURE_NAMES`` columns (and, optionally, the ``KEY_COLUMNS``
    that say who meets whom, which the collaborative-filtering model reads) in, slowdowns (>= 1) out."""

    def load_context(self, context: Any) -> None:
        self._stored = load_model(context.artifacts[ARTIFACT_DIR])

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> np.ndarray:
        check_schema([c for c in model_input.columns if c not in KEY_COLUMNS], where="pyfunc input")
        X = model_input[list(FEATURE_NAMES)].to_numpy(dtype=np.float64)
        model = self._stored.model
        if uses_keys(model) and all(c in model_input.columns for c in KEY_COLUMNS):
            col = {c: model_input[c].to_numpy() for c in KEY_COLUMNS}
            keys = PairKeys(col["key_workload_a"].astype(object), col["key_knobs_a"].astype(object), col["key_workload_b"].astype(object),
                            col["key_knobs_b"].astype(object), col["key_gpu_mem_mib"].astype(np.float64))
            return np.asarray(model.predict(X, keys))  # type: ignore[call-arg]
        return np.asarray(model.predict(X))


KEY_COLUMNS = ("key_workload_a", "key_knobs_a", "key_workload_b", "key_knobs_b", "key_gpu_mem_mib")


def signature() -> ModelSignature:
    keys = [ColSpec("string", n, required=False) for n in KEY_COLUMNS[:4]] + [ColSpec("double", KEY_COLUMNS[4], required=False)]
    return ModelSignature(
        inputs=Schema([*(ColSpec("double", n) for n in FEATURE_NAMES), *keys]),
        outputs=Schema([ColSpec("double", "slowdown")]),
    )


def pip_requirements(kind: ModelKind) -> list[str]:
    """Pinned from this environment; listed explicitly so MLflow does not infer them (slow)."""
    wanted = ["numpy", "pandas", "polars", "scikit-learn", "mlflow"]
    if kind in (ModelKind.LIGHTGBM, ModelKind.CF):
        wanted.append("lightgbm")  # the factor model answers cold starts with one
    out = []
    for dist in wanted:
        try:
            out.append(f"{dist}=={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            out.append(dist)
    return out


# ---- training ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TrainResult:
    run_id: str
    kind: ModelKind
    cv: ModelReport
    dataset_digest: str
    version: int | None  # registered version, None without --register
    champion: int | None  # the champion version after this run
    moved: bool  # the alias moved to this version
    reason: str  # why it moved or not

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "model": self.kind.value,
            "version": self.version,
            "champion": self.champion,
            "champion_moved": self.moved,
            "reason": self.reason,
            "dataset_digest": self.dataset_digest,
            "cv": self.cv.as_dict(),
            "synthetic_samples": self.cv.synthetic_samples,
        }


def cv_spec(digest: str, folds: int, seed: int) -> str:
    return f"{digest}:{folds}:{seed}:{FEATURE_SCHEMA}"


def _metrics(cv: ModelReport) -> dict[str, float]:
    out: dict[str, float] = {}
    if cv.overall.mape is not None:
        out["cv_mape"] = cv.overall.mape
    if cv.overall.r2 is not None:
        out["cv_r2"] = cv.overall.r2
    if cv.moderate_mape is not None:
        out["cv_moderate_mape"] = cv.moderate_mape
    for lv, c in cv.coverage:
        out[f"cv_bound_coverage_{round(100 * lv)}"] = c
    for t, acc in cv.by_type:
        key = t.replace("+", "_").lower()
        if acc.mape is not None:
            out[f"cv_mape_{key}"] = acc.mape
        if acc.r2 is not None:
            out[f"cv_r2_{key}"] = acc.r2
    return out


def train(
    dataset: CoLocationDataset,
    kind: ModelKind,
    *,
    folds: int = 5,
    seed: int = 0,
    register: bool = False,
    uri: str | None = None,
    name: str = MODEL_NAME,
    params: dict[str, Any] | None = None,
) -> TrainResult:
    """Cross-validate, fit on all rows, log the run; with ``register`` add a version and judge the champion."""
    params = dict(params or {})
    samples = dataset.samples()
    if len(samples) == 0:
        raise SpecError("no feasible co-located pairs to learn from", where=dataset.origin)
    cv = cross_validate(samples, kind, folds=folds, seed=seed, **params)
    model = fit_model(make_model(kind, seed, **params), samples)
    estimator_params = json.dumps(model.state()[0]["params"], sort_keys=True)
    digest = dataset.digest()
    spec = cv_spec(digest, folds, seed)
    target = tracking_uri(uri)
    with _using(target) as client, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLflow's advice on type hints, input examples, cloudpickle
        exp = _experiment(client, target)
        with mlflow.start_run(experiment_id=exp) as run, tempfile.TemporaryDirectory() as tmp:
            mlflow.log_params(
                {
                    "model_kind": kind.value,
                    "estimator_params": estimator_params,
                    "folds": folds,
                    "seed": seed,
                    "rows": dataset.rows,
                    "samples": len(samples),
                    "excluded_infeasible": dataset.excluded_infeasible,
                    "synthetic_rows": dataset.synthetic_rows,
                    "suspect_rows": dataset.suspect_rows,
                    "feature_schema": FEATURE_SCHEMA,
                }
            )
            mlflow.log_metrics(_metrics(cv))
            mlflow.set_tags({"dataset_digest": digest, "cv_spec": spec, "synthetic": str(dataset.synthetic_rows > 0).lower()})
            source = dataset.origin if Path(dataset.origin).exists() else None
            mlflow.log_input(
                mlflow.data.from_polars(dataset.frame, source=source, name="co-location", digest=digest[:36]),  # type: ignore[attr-defined]
                context="training",
            )
            folder = save_model(model, Path(tmp) / ARTIFACT_DIR, {"dataset_digest": digest, "cv_spec": spec, "cv": cv.as_dict()}, cv.bound)
            info = mlflow.pyfunc.log_model(
                name="model",
                python_model=IacPyfunc(),
                artifacts={ARTIFACT_DIR: str(folder)},
                signature=signature(),
                pip_requirements=pip_requirements(kind),
                registered_model_name=name if register else None,
            )
    if not register:
        return TrainResult(run.info.run_id, kind, cv, digest, None, None, False, "not registered (no --register)")
    version = int(info.registered_model_version)
    tags = {"model_kind": kind.value, "estimator_params": estimator_params, "cv_spec": spec, "cv_mape": str(cv.overall.mape), "feature_schema": FEATURE_SCHEMA}
    client = _client(target)
    for k, v in tags.items():
        client.set_model_version_tag(name, str(version), k, v)
    moved, champion, reason = _judge(client, name, version, cv, spec, samples, folds, seed)
    return TrainResult(run.info.run_id, kind, cv, digest, version, champion, moved, reason)


def _judge(
    client: mlflow.MlflowClient, name: str, version: int, cv: ModelReport, spec: str, samples: Any, folds: int, seed: int
) -> tuple[bool, int, str]:
    """Move ``champion`` to ``version`` iff its CV MAPE is lower than the champion's on the same CV."""
    new = cv.overall.mape if cv.overall.mape is not None else float("inf")
    try:
        current = client.get_model_version_by_alias(name, CHAMPION)
    except mlflow.exceptions.MlflowException:
        current = None
    if current is None:
        client.set_registered_model_alias(name, CHAMPION, str(version))
        return True, version, f"first champion (cv MAPE {new:.3f} %)"
    tags = dict(current.tags or {})
    if tags.get("cv_spec") == spec and "cv_mape" in tags:
        old, how = float(tags["cv_mape"]), "its recorded figure on this CV"
    elif tags.get("model_kind") in {k.value for k in ModelKind}:
        kind = ModelKind(tags["model_kind"])
        old_params = json.loads(tags.get("estimator_params", "{}"))
        if "hidden" in old_params:
            old_params["hidden"] = tuple(old_params["hidden"])
        old_cv = cross_validate(samples, kind, folds=folds, seed=seed, **old_params)
        old, how = (old_cv.overall.mape or float("inf")), f"its {kind.value} model re-run through this CV"
    else:
        client.set_registered_model_alias(name, CHAMPION, str(version))
        return True, version, f"champion v{current.version} has no ElastiCo CV record; replaced"
    if new < old:
        client.set_registered_model_alias(name, CHAMPION, str(version))
        return True, version, f"cv MAPE {new:.3f} % beats champion v{current.version} ({old:.3f} %, {how})"
    return False, int(current.version), f"cv MAPE {new:.3f} % does not beat champion v{current.version} ({old:.3f} %, {how})"


# ---- fetching ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ChampionRef:
    version: int
    run_id: str


def champion_ref(uri: str, name: str = MODEL_NAME) -> ChampionRef | None:
    """The version the alias points at, None when nothing is registered; raises if the store fails."""
    with _quiet_http():
        client = _client(uri)
        try:
            mv = client.get_model_version_by_alias(name, CHAMPION)
        except mlflow.exceptions.MlflowException as exc:
            if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
                return None
            raise
    return ChampionRef(int(mv.version), str(mv.run_id))


def download_version(uri: str, version: int, dest: Path, name: str = MODEL_NAME) -> StoredModel:
    """Fetch one registered version into ``dest`` and load it (schema checked twice: signature + model.json)."""
    with _quiet_http(), _using(uri), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dest.mkdir(parents=True, exist_ok=True)
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{name}/{version}", dst_path=str(dest)))
        sig = mlflow.models.Model.load(str(local)).signature
    if sig is None or sig.inputs is None:
        raise SpecError("registered model has no input signature", where=f"models:/{name}/{version}")
    check_schema([n for n in sig.inputs.input_names() if n not in KEY_COLUMNS], where=f"models:/{name}/{version}")
    return load_model(local / "artifacts" / ARTIFACT_DIR)


# ---- retraining on the cluster's own pairs ---------------------------------------------------------
CHALLENGER = "challenger"


@dataclass(frozen=True, slots=True)
class RetrainResult:
    """What one retraining decided: the challenger's and the champion's error on the newest runtime rows."""

    run_id: str
    version: int  # the challenger's registered version
    champion_before: int | None
    champion: int | None  # after the decision
    moved: bool
    reason: str
    holdout_rows: int  # newest runtime rows held out (never trained on)
    train_rows: int
    challenger_mape: float | None
    champion_mape: float | None
    dataset_digest: str

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


def retrain(
    data: CoLocationDataset,
    runtime: CoLocationDataset | None,
    kind: ModelKind = ModelKind.CF,
    *,
    holdout_fraction: float = HOLDOUT_FRACTION,
    min_holdout: int = MIN_HOLDOUT,
    folds: int = 5,
    seed: int = 0,
    uri: str | None = None,
    name: str = MODEL_NAME,
) -> RetrainResult:
    """Train a challenger on every row but the newest runtime ones; move ``champion`` only if it predicts those better.

    Both models are scored on the same held-out rows (the newest ``holdout_fraction`` of the usable runtime
    rows, at least ``min_holdout``); with fewer runtime rows than that nothing can be judged and the
    champion stays. The challenger is registered either way (alias ``challenger``), the run logs both
    figures, the data digest and the decision.
    """
    target = tracking_uri(uri)
    client = _client(target)
    try:
        current = client.get_model_version_by_alias(name, CHAMPION)
    except mlflow.exceptions.MlflowException:
        current = None
    champion = None
    if current is not None:
        with tempfile.TemporaryDirectory() as tmp:
            stored = download_version(target, int(current.version), Path(tmp), name)
        champion = LearnedPredictor(stored.model, name=f"{name} v{current.version}")
    label = f"champion v{current.version}" if current is not None else "the champion"
    result = challenge(data, runtime, champion, kind, holdout_fraction=holdout_fraction, min_holdout=min_holdout,
                       folds=folds, seed=seed, champion_label=label)
    if result.model is None or result.train is None:
        raise SpecError("no feasible co-located pairs to learn from", where=data.origin)
    model, cv, train_ds, moved, reason = result.model, result.cv, result.train, result.promoted, result.reason
    challenger_mape, champion_mape = result.challenger_mape, result.champion_mape
    digest = train_ds.digest()
    with _using(target) as client, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exp = _experiment(client, target)
        with mlflow.start_run(experiment_id=exp, run_name="iac-retrain") as run, tempfile.TemporaryDirectory() as tmp:
            mlflow.log_params({"model_kind": kind.value, "rows": train_ds.rows, "holdout_rows": result.holdout_rows,
                               "runtime_rows": 0 if runtime is None else runtime.rows, "feature_schema": FEATURE_SCHEMA,
                               "champion_before": None if current is None else current.version})
            metrics = _metrics(cv) if cv is not None else {}
            if challenger_mape is not None:
                metrics["holdout_mape_challenger"] = challenger_mape
            if champion_mape is not None:
                metrics["holdout_mape_champion"] = champion_mape
            mlflow.log_metrics(metrics)
            mlflow.set_tags({"dataset_digest": digest, "decision": "promoted" if moved else "kept", "reason": reason,
                             "retrain": "true"})
            folder = save_model(model, Path(tmp) / ARTIFACT_DIR, {"dataset_digest": digest, "retrain": reason},
                                None if cv is None else cv.bound)
            info = mlflow.pyfunc.log_model(name="model", python_model=IacPyfunc(), artifacts={ARTIFACT_DIR: str(folder)},
                                           signature=signature(), pip_requirements=pip_requirements(kind),
                                           registered_model_name=name)
    version = int(info.registered_model_version)
    estimator_params = json.dumps(model.state()[0]["params"], sort_keys=True)
    for tag, value in {"model_kind": kind.value, "estimator_params": estimator_params, "feature_schema": FEATURE_SCHEMA,
                       "retrain_decision": reason, "holdout_mape": str(challenger_mape)}.items():
        client.set_model_version_tag(name, str(version), tag, value)
    client.set_registered_model_alias(name, CHALLENGER, str(version))
    if moved:
        client.set_registered_model_alias(name, CHAMPION, str(version))
    before = None if current is None else int(current.version)
    return RetrainResult(run.info.run_id, version, before, version if moved else before, moved, reason,
                         result.holdout_rows, train_ds.rows, challenger_mape, champion_mape, digest)
