"""The three regressors: scikit-learn contract, the >= 1 floor, reproducibility, state round trip."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.base import clone

from elastico_core.iac.features import N_FEATURES
from elastico_core.iac.models import (
    LightGBMRegressor,
    LinearRegressor,
    MLPRegressor,
    ModelKind,
    make_model,
    model_from_state,
)

QUICK_MLP = {"max_epochs": 15, "patience": 5}


@pytest.fixture(scope="module")
def data(synthetic_small):  # type: ignore[no-untyped-def]
    s = synthetic_small.samples()
    return s.X, s.y, s.group


FEATURE_KINDS = [k for k in ModelKind if k is not ModelKind.CF]


@pytest.fixture(scope="module")
def fitted(data):  # type: ignore[no-untyped-def]
    X, y, _ = data
    return {
        ModelKind.MLP: MLPRegressor(**QUICK_MLP).fit(X, y),
        ModelKind.LIGHTGBM: LightGBMRegressor(n_estimators=30).fit(X, y),
        ModelKind.LINEAR: LinearRegressor().fit(X, y),
    }


def test_init_only_stores_parameters_and_clone_works() -> None:
    for kind in ModelKind:
        m = make_model(kind, 3)
        c = clone(m)
        assert c.get_params() == m.get_params()
        assert not any(k.endswith("_") for k in vars(m))
    assert make_model(ModelKind.MLP, 3).random_state == 3


@pytest.mark.parametrize("kind", FEATURE_KINDS)
def test_predictions_are_finite_and_at_least_one(fitted, data, kind: ModelKind) -> None:  # type: ignore[no-untyped-def]
    X, _, _ = data
    p = fitted[kind].predict(X)
    assert p.shape == (X.shape[0],)
    assert np.isfinite(p).all() and (p >= 1.0).all()


wild = st.one_of(st.floats(-1e6, 1e9, allow_nan=False, allow_infinity=False), st.just(math.nan))


@settings(max_examples=40, deadline=None)
@given(X=arrays(np.float64, (7, N_FEATURES), elements=wild))
def test_no_input_makes_a_model_predict_below_one_or_nan(fitted, X: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    for model in fitted.values():
        p = model.predict(X)
        assert np.isfinite(p).all() and (p >= 1.0).all()


def test_mlp_is_reproducible_under_a_seed(data) -> None:  # type: ignore[no-untyped-def]
    X, y, g = data
    a = MLPRegressor(random_state=5, **QUICK_MLP).fit(X, y, groups=g)
    b = MLPRegressor(random_state=5, **QUICK_MLP).fit(X, y, groups=g)
    c = MLPRegressor(random_state=6, **QUICK_MLP).fit(X, y, groups=g)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    assert not np.array_equal(a.predict(X), c.predict(X))


def test_mlp_numpy_path_equals_the_torch_graph(fitted, data) -> None:  # type: ignore[no-untyped-def]
    X, _, _ = data
    mlp = fitted[ModelKind.MLP]
    np.testing.assert_allclose(mlp.predict(X), mlp.predict_torch(X), rtol=1e-5)  # float32 inference


def test_mlp_architecture_is_the_papers(fitted) -> None:  # type: ignore[no-untyped-def]
    from torch import nn

    net = fitted[ModelKind.MLP].net_
    kinds = [type(m) for m in net]
    assert kinds == [nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Dropout] * 2 + [nn.Linear]
    assert net[3].p == 0.2 and net[-1].out_features == 1


def test_models_learn_something(fitted, data) -> None:  # type: ignore[no-untyped-def]
    X, y, _ = data
    base = np.mean(np.abs(np.exp(np.log(y).mean()) - y) / y)
    for kind in (ModelKind.LIGHTGBM, ModelKind.LINEAR):
        assert np.mean(np.abs(fitted[kind].predict(X) - y) / y) < base


@pytest.mark.parametrize("kind", FEATURE_KINDS)
def test_state_round_trip_predicts_the_same(fitted, data, kind: ModelKind) -> None:  # type: ignore[no-untyped-def]
    X, _, _ = data
    meta, arrays_ = fitted[kind].state()
    back = model_from_state(kind, meta, arrays_)
    np.testing.assert_allclose(back.predict(X), fitted[kind].predict(X), rtol=1e-12)


def test_bad_inputs_are_refused(fitted) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="slowdowns must be finite and > 0"):
        LinearRegressor().fit(np.zeros((3, N_FEATURES)), [1.0, 0.0, 2.0])
    with pytest.raises(ValueError, match="46 IAC feature columns"):
        fitted[ModelKind.LINEAR].predict(np.zeros((2, 5)))
    with pytest.raises(RuntimeError, match="not fitted"):
        LinearRegressor().predict(np.zeros((2, N_FEATURES)))
    with pytest.raises(ValueError, match="infinite"):
        fitted[ModelKind.LINEAR].predict(np.full((1, N_FEATURES), np.inf))


def test_all_nan_columns_are_imputed() -> None:
    rng = np.random.default_rng(0)
    X = rng.random((40, N_FEATURES))
    X[:, :5] = np.nan
    y = 1.0 + X[:, 20]
    for kind in FEATURE_KINDS:  # the factor model's own tests are in test_cf.py (it needs the pairs' keys)
        params = QUICK_MLP if kind is ModelKind.MLP else {}
        p = make_model(kind, 0, **params).fit(X, y).predict(X)
        assert np.isfinite(p).all()
