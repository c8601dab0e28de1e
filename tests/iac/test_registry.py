"""MLflow round trip on a temporary SQLite store: the champion moves only when better; the planner's
loader uses the registry, then its cache when MLflow is unreachable, then the fallback."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from elastico_core.iac.bench import candidate_batch
from elastico_core.iac.champion import load_champion
from elastico_core.iac.models import ModelKind
from elastico_core.iac.predictor import SlowdownPredictor, TableLookup

BAD = {"alpha": 100.0}  # a heavily shrunk linear model: worse than the default on any CV
GOOD = {"alpha": 1e-3}


@dataclass
class Store:
    uri: str
    root: Path
    results: list  # type: ignore[type-arg]


@pytest.fixture
def fluent(store: Store):  # type: ignore[no-untyped-def]
    """MLflow's fluent API pointed at the test store (``models:/`` URIs), restored afterwards."""
    import mlflow

    saved = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
    mlflow.set_tracking_uri(store.uri)
    mlflow.set_registry_uri(store.uri)
    yield mlflow
    mlflow.set_tracking_uri(saved[0])
    mlflow.set_registry_uri(saved[1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, synthetic_small) -> Store:  # type: ignore[no-untyped-def]
    from elastico_core.iac import registry
    from elastico_core.iac.synthetic import generate

    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'store' / 'mlflow.db'}"
    other = generate(120, seed=11)
    runs = [
        registry.train(synthetic_small, ModelKind.LINEAR, folds=3, register=True, uri=uri, params=BAD),
        registry.train(synthetic_small, ModelKind.LINEAR, folds=3, register=True, uri=uri, params=GOOD),
        registry.train(synthetic_small, ModelKind.LINEAR, folds=3, register=True, uri=uri, params=BAD),
        registry.train(other, ModelKind.LINEAR, folds=3, register=True, uri=uri, params=BAD),
        registry.train(synthetic_small, ModelKind.LINEAR, folds=3, register=False, uri=uri, params=GOOD),
    ]
    return Store(uri, root, runs)


def test_the_champion_moves_only_when_the_cv_is_beaten(store: Store) -> None:
    import mlflow

    assert mlflow.get_tracking_uri() != store.uri  # training left the process's MLflow settings alone
    first, better, worse, elsewhere, unregistered = store.results
    assert (first.version, first.moved, first.champion) == (1, True, 1)
    assert (better.version, better.moved, better.champion) == (2, True, 2)
    assert better.cv.overall.mape < first.cv.overall.mape
    assert "its recorded figure on this CV" in better.reason
    assert (worse.version, worse.moved, worse.champion) == (3, False, 2)
    assert "does not beat champion v2" in worse.reason
    # another dataset: the champion's model is re-run through the new folds before comparing
    assert (elsewhere.version, elsewhere.moved, elsewhere.champion) == (4, False, 2)
    assert "re-run through this CV" in elsewhere.reason
    assert unregistered.version is None and not unregistered.moved


def test_the_run_records_params_metrics_dataset_and_schema(store: Store, synthetic_small, fluent) -> None:  # type: ignore[no-untyped-def]
    from elastico_core.iac.features import FEATURE_NAMES

    mlflow = fluent
    run = mlflow.MlflowClient(tracking_uri=store.uri).get_run(store.results[1].run_id)
    assert run.data.params["model_kind"] == "linear" and run.data.params["folds"] == "3"
    assert run.data.metrics["cv_mape"] == pytest.approx(store.results[1].cv.overall.mape)
    assert run.data.tags["dataset_digest"] == synthetic_small.digest()
    assert run.data.tags["synthetic"] == "true"
    inputs = run.inputs.dataset_inputs
    assert len(inputs) == 1 and inputs[0].dataset.digest == synthetic_small.digest()[:36]
    model = mlflow.pyfunc.load_model(f"models:/elastico-iac/{store.results[1].version}")
    from elastico_core.iac.registry import KEY_COLUMNS

    assert model.metadata.get_input_schema().input_names() == [*FEATURE_NAMES, *KEY_COLUMNS]


def test_the_pyfunc_predicts_like_the_planner_adapter(store: Store, synthetic_small, fluent) -> None:  # type: ignore[no-untyped-def]
    import pandas as pd

    from elastico_core.iac.features import FEATURE_NAMES

    X = synthetic_small.samples().X[:20]
    pyfunc = fluent.pyfunc.load_model(f"models:/elastico-iac/{store.results[1].version}")
    got = np.asarray(pyfunc.predict(pd.DataFrame(X, columns=list(FEATURE_NAMES))))
    loaded = load_champion(tracking_uri=store.uri, cache_dir=store.root / "cache-pyfunc")
    want = loaded.predictor.model.predict(X)  # type: ignore[attr-defined]
    np.testing.assert_allclose(got, want)


def test_load_champion_then_cache_then_fallback(store: Store) -> None:
    cache = store.root / "cache"
    batch = candidate_batch(16)
    live = load_champion(tracking_uri=store.uri, cache_dir=cache)
    assert (live.origin, live.version) == ("registry", 2)
    assert isinstance(live.predictor, SlowdownPredictor)
    assert (cache / "elastico-iac" / "current.json").exists()

    down = f"http://127.0.0.1:{free_port()}"
    cached = load_champion(tracking_uri=down, cache_dir=cache, probe_timeout_s=0.5)
    assert (cached.origin, cached.version) == ("cache", 2)
    assert "unreachable" in cached.message and "using cached champion elastico-iac v2" in cached.message
    np.testing.assert_array_equal(cached.predictor.predict(batch), live.predictor.predict(batch))

    table = TableLookup(default=1.1)
    none = load_champion(tracking_uri=down, cache_dir=store.root / "empty-cache", fallback=table, probe_timeout_s=0.5)
    assert none.origin == "fallback" and none.predictor is table
    assert "no cached model either" in none.message


def test_no_store_at_all_falls_back(tmp_path: Path) -> None:
    got = load_champion(tracking_uri=f"sqlite:///{tmp_path / 'absent' / 'mlflow.db'}", cache_dir=tmp_path / "c")
    assert got.origin == "fallback" and got.predictor.name == "none"
    assert not (tmp_path / "absent").exists()  # looking did not create a store


def test_a_cached_model_of_another_schema_is_refused(store: Store) -> None:
    cache = store.root / "cache-bad"
    assert load_champion(tracking_uri=store.uri, cache_dir=cache).origin == "registry"
    meta = cache / "elastico-iac" / "v2" / "artifacts" / "model" / "model.json"
    doc = json.loads(meta.read_text())
    doc["feature_names"] = doc["feature_names"][:36]
    meta.write_text(json.dumps(doc))
    got = load_champion(tracking_uri=f"http://127.0.0.1:{free_port()}", cache_dir=cache, probe_timeout_s=0.5)
    assert got.origin == "fallback"
    assert "wrong feature schema" in got.message


def test_auto_lookup_is_cached_while_the_store_is_unchanged(tmp_path: Path) -> None:
    """With no champion registered, the registry's answer is reused (seconds saved per plan) until the store changes."""
    import time

    from elastico_core.iac.champion import _note_lookup, load_champion, recent_lookup
    from elastico_core.iac.predictor import NoInterference

    db = tmp_path / "mlflow.db"
    db.write_bytes(b"")
    uri = f"sqlite:///{db}"
    cache = tmp_path / "cache"
    _note_lookup(cache / "elastico-iac", uri, None)
    assert recent_lookup(cache / "elastico-iac", uri, 60.0) is not None
    t0 = time.perf_counter()
    got = load_champion(tracking_uri=uri, cache_dir=cache, fallback=NoInterference(), lookup_ttl_s=60.0)
    assert got.origin == "fallback" and "asked" in got.message
    assert time.perf_counter() - t0 < 0.5
    db.write_bytes(b"changed")
    import os

    os.utime(db, (time.time() + 5, time.time() + 5))
    assert recent_lookup(cache / "elastico-iac", uri, 60.0) is None
    assert recent_lookup(cache / "elastico-iac", "sqlite:///elsewhere.db", 60.0) is None
