"""The collaborative-filtering model: who-meets-whom effects learned from pairs, cold starts, bounds."""

from __future__ import annotations

import numpy as np
import pytest

from elastico_core.iac.cf import CFRegressor, PairKeys, canonical_knobs
from elastico_core.iac.conformal import UpperBound, conformal_quantile, coverage
from elastico_core.iac.evaluate import cross_validate, fit_model, predict_samples
from elastico_core.iac.models import ModelKind, model_from_state


@pytest.fixture(scope="module")
def fitted(synthetic_small):  # type: ignore[no-untyped-def]
    s = synthetic_small.samples()
    return s, fit_model(CFRegressor(epochs=150), s)


def test_keys_name_who_meets_whom_in_both_directions(synthetic_small) -> None:  # type: ignore[no-untyped-def]
    s = synthetic_small.samples()
    n = len(s) // 2
    assert (s.keys.workload_a[:n] == s.keys.workload_b[n:]).all() and (s.keys.knobs_a[n:] == s.keys.knobs_b[:n]).all()
    assert canonical_knobs('{"b": 1, "a": true}') == '{"a":true,"b":1}' and canonical_knobs("") == "{}"


def test_fit_needs_keys_and_learns_the_training_pairs(fitted) -> None:  # type: ignore[no-untyped-def]
    s, model = fitted
    with pytest.raises(ValueError, match="keys"):
        CFRegressor().fit(s.X, s.y)
    p = predict_samples(model, s)
    assert np.isfinite(p).all() and (p >= 1.0).all()
    assert np.mean(np.abs(np.log(p) - np.log(s.y))) < 0.2  # in-sample: the effects carry the pairs


def test_unknown_workloads_are_cold_starts_answered_by_the_prior(fitted) -> None:  # type: ignore[no-untyped-def]
    """Default: an unseen side contributes its prior (0), the known side and the GPU still count."""
    s, model = fitted
    k = s.keys
    strange = PairKeys(np.array(["never-seen"] * len(s), dtype=object), k.knobs_a, k.workload_b, k.knobs_b, k.gpu_mem_mib)
    assert not model.known(strange).any() and model.known(k).all()
    nobody = PairKeys(strange.workload_a, k.knobs_a, strange.workload_a, k.knobs_b, k.gpu_mem_mib)
    base = model.predict(s.X, nobody)  # neither side known: mu + the GPU's effect
    np.testing.assert_allclose(base, model.predict_cold(s.X, k))
    half = model.predict(s.X, strange)  # b's pressure still counts
    assert not np.allclose(half, base) and (half >= 1.0).all()
    far = PairKeys(nobody.workload_a, k.knobs_a, nobody.workload_b, k.knobs_b, np.full(len(s), 1.0))
    np.testing.assert_allclose(model.predict(s.X, far), max(1.0, float(np.exp(model.mu_))))  # an unseen GPU: mu


def test_the_feature_cold_start_is_the_lightgbm(synthetic_small) -> None:  # type: ignore[no-untyped-def]
    s = synthetic_small.samples()
    model = fit_model(CFRegressor(epochs=50, cold="features"), s)
    strange = PairKeys(np.array(["never-seen"] * len(s), dtype=object), s.keys.knobs_a, s.keys.workload_b, s.keys.knobs_b,
                       s.keys.gpu_mem_mib)
    np.testing.assert_allclose(model.predict(s.X, strange), model.cold_.predict(s.X))
    np.testing.assert_allclose(model.predict(s.X), model.cold_.predict(s.X))  # no keys at all: the feature model
    with pytest.raises(ValueError, match="cold start"):
        CFRegressor(cold="guess").fit(s.X, s.y, keys=s.keys)


def test_state_round_trip_predicts_the_same(fitted) -> None:  # type: ignore[no-untyped-def]
    s, model = fitted
    meta, arrays = model.state()
    again = model_from_state(ModelKind.CF, meta, arrays)
    np.testing.assert_allclose(again.predict(s.X, s.keys), model.predict(s.X, s.keys))
    assert again.get_params() == model.get_params() and isinstance(again.level_l2, tuple)


def test_each_level_has_its_own_shrinkage(synthetic_small) -> None:  # type: ignore[no-untyped-def]
    """A level's factor scales its L2 penalty: a huge one pins that level's effects to 0, the others take over."""
    s = synthetic_small.samples()
    pinned = fit_model(CFRegressor(epochs=150, level_l2=(1.0, 1e6, 1.0)), s)
    assert np.abs(pinned.sens_["wg"]).max() < 1e-3 and np.abs(pinned.press_["wg"]).max() < 1e-3
    assert np.abs(pinned.sens_["w"]).max() > 0.05  # the workload level carries what the GPU level may not
    with pytest.raises(ValueError, match="level_l2"):
        CFRegressor(level_l2=(1.0, 1.0)).fit(s.X, s.y, keys=s.keys)  # type: ignore[arg-type]


def test_the_decaying_learning_rate_lets_the_fit_settle(synthetic_small) -> None:  # type: ignore[no-untyped-def]
    """At a constant rate the non-smooth ape loss ends on the last steps' jitter; decayed, it fits the pairs closer."""
    s = synthetic_small.samples()

    def in_sample(model: CFRegressor) -> float:
        return float(np.mean(np.abs(predict_samples(fit_model(model, s), s) - s.y) / s.y))

    assert in_sample(CFRegressor(epochs=150)) < 0.8 * in_sample(CFRegressor(epochs=150, lr_decay=False))


def test_conformal_quantile_and_coverage_on_known_scores() -> None:
    scores = np.arange(1, 100, dtype=float)  # 99 scores: the 90 % bound is the 90th smallest
    assert conformal_quantile(scores, 0.9) == 90.0
    assert conformal_quantile(scores[:5], 0.9) == np.inf  # too few scores for that level
    rng = np.random.default_rng(0)
    y = np.exp(np.abs(rng.normal(0.3, 0.2, 4000))) + 0.5
    pred = y * np.exp(rng.normal(0, 0.2, 4000))
    folds = rng.integers(5, size=4000)
    assert abs(coverage(y, pred, folds, 0.9) - 0.9) < 0.02
    b = UpperBound.of(np.log(y) - np.log(pred))
    assert (b.upper(pred, 0.9) >= pred).all()


def test_cv_reports_the_bound_coverage(synthetic_small) -> None:  # type: ignore[no-untyped-def]
    rep = cross_validate(synthetic_small.samples(), ModelKind.CF, folds=3, seed=0, epochs=100)
    cov = dict(rep.coverage)
    assert set(cov) == {0.8, 0.9, 0.95} and all(0.0 <= c <= 1.0 for c in cov.values())
    assert rep.bound is not None and len(rep.bound.known) == rep.overall.samples
