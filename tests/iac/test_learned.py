"""The adapter the planner calls: a SlowdownPredictor that never answers below 1, NaN, or an exception."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from elastico_core.iac.bench import bench_predictor, candidate_batch
from elastico_core.iac.features import N_FEATURES
from elastico_core.iac.learned import LearnedPredictor
from elastico_core.iac.models import LinearRegressor
from elastico_core.iac.predictor import NoInterference, SlowdownPredictor, TableLookup


class Rogue(LinearRegressor):
    """Answers whatever it is told to (NaN, 0.3, an exception)."""

    def __init__(self, answer: Any = np.nan) -> None:
        self.answer = answer
        self.n_features_in_ = N_FEATURES

    def predict(self, X: Any) -> np.ndarray:
        if isinstance(self.answer, Exception):
            raise self.answer
        return np.full(len(X), self.answer)


@pytest.fixture(scope="module")
def linear(synthetic_small):  # type: ignore[no-untyped-def]
    s = synthetic_small.samples()
    return LinearRegressor().fit(s.X, s.y)


def test_it_is_a_slowdown_predictor(linear) -> None:  # type: ignore[no-untyped-def]
    p = LearnedPredictor(linear, name="linear")
    assert isinstance(p, SlowdownPredictor)
    out = p.predict(candidate_batch(64))
    assert out.shape == (64,) and (out >= 1.0).all()


@pytest.mark.parametrize("answer", [np.nan, 0.3, -2.0, np.inf], ids=["nan", "below-one", "negative", "inf"])
def test_bad_answers_become_no_slowdown(answer: float) -> None:
    out = LearnedPredictor(Rogue(answer)).predict(candidate_batch(8))
    assert np.isfinite(out).all() and (out >= 1.0).all()


def test_a_failing_model_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    table = TableLookup(default=1.5)
    out = LearnedPredictor(Rogue(RuntimeError("boom")), name="rogue", fallback=table).predict(candidate_batch(4))
    np.testing.assert_array_equal(out, 1.5)
    assert "rogue failed (RuntimeError: boom)" in caplog.text


def test_only_models_of_this_schema_are_wrapped() -> None:
    m = Rogue(1.0)
    m.n_features_in_ = 36  # a model of the paper's 36 features, without the missingness flags
    with pytest.raises(ValueError, match="46 IAC features"):
        LearnedPredictor(m)
    with pytest.raises(ValueError, match="46 IAC feature columns"):
        LinearRegressor().fit(np.random.default_rng(0).random((10, 5)), np.full(10, 1.2))


def test_empty_batch(linear) -> None:  # type: ignore[no-untyped-def]
    assert LearnedPredictor(linear).predict(candidate_batch(3).swapped()).shape == (3,)
    assert NoInterference().predict(candidate_batch(2)).shape == (2,)


def test_batched_throughput_is_generous(linear) -> None:  # type: ignore[no-untyped-def]
    """Loose floor only (the machine is shared): the real figure comes from `elastico bench iac`."""
    r = bench_predictor(LearnedPredictor(linear), candidate_batch(5000), calls=5, warmup=1)
    assert r.pairs_per_s > 20_000
    assert set(r.as_dict()) == {"pairs_per_s", "latency_ms"} and set(r.as_dict()["latency_ms"]) == {"p50", "p99"}
