"""Retraining: challenger vs champion on the newest runtime rows; the alias moves only on a win."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from elastico_core.iac.dataset import CoLocationDataset, validate
from elastico_core.iac.models import ModelKind
from elastico_core.iac.registry import retrain
from elastico_core.iac.retraining import split_newest


def _runtime(base: CoLocationDataset, n: int, factor: float) -> CoLocationDataset:
    """Runtime rows built from ``base`` pairs, with co-located throughputs scaled by ``factor`` (a new truth)."""
    f = base.frame.filter(pl.Series(base.usable_mask())).head(n)
    f = f.with_columns(
        (pl.col("colo_tput_a") / factor).alias("colo_tput_a"), (pl.col("colo_tput_b") / factor).alias("colo_tput_b"),
        pl.lit("runtime").alias("source"), pl.Series("window_end", [f"2026-12-01T12:{i:02d}:00+00:00" for i in range(f.height)]),
        pl.lit("j1").alias("job_a"), pl.lit("j2").alias("job_b"),
    )
    return validate(f, origin="runtime")


def test_split_holds_out_the_newest_usable_runtime_rows(synthetic_small) -> None:  # type: ignore[no-untyped-def]
    rt = _runtime(synthetic_small, 20, 1.0)
    older, newest = split_newest(rt, 0.2, 2)
    assert newest is not None and older is not None and newest.rows == 4 and older.rows == 16
    assert min(newest.frame["window_end"].to_list()) > max(older.frame["window_end"].to_list())
    assert split_newest(_runtime(synthetic_small, 1, 1.0), 0.2, 2)[1] is None  # too few to judge on


@pytest.mark.slow
def test_the_challenger_replaces_the_champion_only_when_it_predicts_the_newest_rows_better(
    synthetic_small, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = retrain(synthetic_small, None, ModelKind.LIGHTGBM, folds=3, uri=uri)
    assert not first.moved and first.champion is None and "not judged" in first.reason
    rt = _runtime(synthetic_small, 30, 1.6)  # the cluster's truth: 1.6x the slowdowns the shipped rows say
    lgb = retrain(synthetic_small, rt, ModelKind.LIGHTGBM, folds=3, uri=uri)
    assert lgb.moved and lgb.champion == lgb.version and "first champion" in lgb.reason and lgb.holdout_rows == 6
    again = retrain(synthetic_small, rt, ModelKind.LINEAR, folds=3, uri=uri)
    assert again.challenger_mape is not None and again.champion_mape is not None
    assert again.moved == (again.challenger_mape < again.champion_mape)
    assert again.champion == (again.version if again.moved else lgb.version)
    assert np.isfinite(again.champion_mape)
