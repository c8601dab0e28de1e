"""The retraining rule without MLflow: challenger vs the model in force on the newest runtime rows."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from elastico_core.iac.dataset import CoLocationDataset, validate
from elastico_core.iac.evaluate import accuracy, fit_model, predict_samples
from elastico_core.iac.features import batch_features
from elastico_core.iac.learned import LearnedPredictor
from elastico_core.iac.models import ModelKind, make_model
from elastico_core.iac.predictor import NoInterference
from elastico_core.iac.retraining import challenge, pair_batch, score


def _runtime(base: CoLocationDataset, n: int, factor: float) -> CoLocationDataset:
    f = base.frame.filter(pl.Series(base.usable_mask())).head(n)
    f = f.with_columns(
        (pl.col("colo_tput_a") / factor).alias("colo_tput_a"), (pl.col("colo_tput_b") / factor).alias("colo_tput_b"),
        pl.lit("runtime").alias("source"), pl.Series("window_end", [f"2026-12-01T12:{i:02d}:00+00:00" for i in range(f.height)]),
    )
    return validate(f, origin="runtime")


def test_pair_batch_is_the_planners_view_of_the_samples(synthetic_small) -> None:  # type: ignore[no-untyped-def]
    s = synthetic_small.samples()
    np.testing.assert_array_equal(batch_features(pair_batch(s)), s.X)
    model = fit_model(make_model(ModelKind.LIGHTGBM, 0), s)
    assert score(LearnedPredictor(model), s) == pytest.approx(accuracy(s.y, predict_samples(model, s)).mape)


def test_nothing_judged_without_enough_runtime_rows(synthetic_small) -> None:  # type: ignore[no-untyped-def]
    res = challenge(synthetic_small, None, NoInterference(), ModelKind.LINEAR, folds=0)
    assert not res.promoted and res.model is not None and res.holdout_rows == 0 and "not judged" in res.reason
    alone = challenge(None, _runtime(synthetic_small, 2, 1.0), NoInterference(), ModelKind.LINEAR, folds=0)
    assert not alone.promoted and alone.model is None and "all held out" in alone.reason


def test_promoted_only_when_better_on_the_newest_rows(synthetic_small) -> None:  # type: ignore[no-untyped-def]
    rt = _runtime(synthetic_small, 40, 1.5)
    res = challenge(synthetic_small, rt, NoInterference(), ModelKind.LIGHTGBM, folds=0, champion_label="none")
    assert res.holdout_rows == 8 and res.train_rows == synthetic_small.rows + 32
    assert res.challenger_mape is not None and res.champion_mape is not None
    assert res.promoted == (res.challenger_mape < res.champion_mape)
    assert res.promoted  # "no interference" is far from 1.5x the synthetic slowdowns
    again = challenge(synthetic_small, rt, res.predictor(), ModelKind.LIGHTGBM, folds=0)
    assert not again.promoted and again.challenger_mape == pytest.approx(again.champion_mape)  # the same model: no win
    with_cv = challenge(synthetic_small, rt, None, ModelKind.LINEAR, folds=3)
    assert with_cv.promoted and "first champion" in with_cv.reason
    assert with_cv.cv is not None and with_cv.predictor().bound is not None
