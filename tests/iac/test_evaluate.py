"""Grouped cross-validation: a workload pair never spans train and test; Table-7-style figures."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastico_core.iac.evaluate import accuracy, cross_validate, evaluate, grouped_folds, report
from elastico_core.iac.models import ModelKind
from elastico_core.model.errors import SpecError

names = st.sampled_from([f"w{i}|w{j}" for i in range(6) for j in range(i, 6)])


@settings(max_examples=80, deadline=None)
@given(groups=st.lists(names, min_size=12, max_size=120), k=st.integers(2, 6), seed=st.integers(0, 99))
def test_no_workload_pair_is_in_train_and_test(groups: list[str], k: int, seed: int) -> None:
    g = np.array(groups, dtype=object)
    if len(set(groups)) < k:
        with pytest.raises(SpecError, match="cannot fill"):
            grouped_folds(g, k, seed)
        return
    folds = grouped_folds(g, k, seed)
    assert len(folds) == k
    seen = np.concatenate([f.test for f in folds])
    assert sorted(seen) == list(range(len(g)))  # every sample tested exactly once
    for f in folds:
        assert len(f.test) > 0
        assert not set(g[f.train]) & set(g[f.test])
        assert len(f.train) + len(f.test) == len(g)


def test_folds_are_seeded() -> None:
    g = np.array([f"p{i % 9}" for i in range(90)], dtype=object)
    a, b = grouped_folds(g, 3, 1), grouped_folds(g, 3, 1)
    assert all(np.array_equal(x.test, y.test) for x, y in zip(a, b, strict=True))


def test_both_directions_of_a_pair_share_a_fold(synthetic_small) -> None:  # type: ignore[no-untyped-def]
    s = synthetic_small.samples()
    n = len(s) // 2
    for f in grouped_folds(s.group, 4, 0):
        test = set(f.test.tolist())
        assert all((i in test) == (i + n in test) for i in range(n))


def test_accuracy_figures() -> None:
    y = np.array([1.0, 2.0, 4.0])
    assert accuracy(y, y).as_dict() == {"mape": 0.0, "r2": 1.0, "samples": 3}
    a = accuracy(y, np.array([1.1, 2.0, 4.0]))
    assert a.mape == pytest.approx(100 * 0.1 / 3, abs=1e-3)
    assert accuracy(np.array([]), np.array([])).as_dict() == {"mape": None, "r2": None, "samples": 0}


def test_report_splits_by_type_and_moderate(synthetic_small) -> None:  # type: ignore[no-untyped-def]
    s = synthetic_small.samples()
    r = report(s, s.y.copy())
    d = r.as_dict()
    assert set(d) == {"overall", "by_type", "moderate_mape", "bound_coverage"}
    assert set(d["by_type"]) == {"T+T", "T+I", "I+I"}
    assert d["by_type"]["T+T"]["samples"] == 0 and d["overall"]["samples"] == len(s)
    assert d["moderate_mape"] == 0.0 and r.synthetic_samples == len(s)


def test_evaluate_json_shape_and_best(synthetic_small) -> None:  # type: ignore[no-untyped-def]
    s = synthetic_small.samples()
    ev = evaluate(s, [ModelKind.LINEAR, ModelKind.LIGHTGBM], folds=3, seed=0, params={ModelKind.LIGHTGBM: {"n_estimators": 20}})
    d = ev.as_dict()
    assert set(d) == {"models", "best"} and set(d["models"]) == {"linear", "lightgbm"}
    mapes = {k: v["overall"]["mape"] for k, v in d["models"].items()}
    assert d["best"] == min(mapes, key=mapes.get)  # type: ignore[arg-type]


def test_same_seed_same_folds_for_every_model(synthetic_small) -> None:  # type: ignore[no-untyped-def]
    s = synthetic_small.samples()
    a = cross_validate(s, ModelKind.LINEAR, folds=3, seed=2)
    b = cross_validate(s, ModelKind.LINEAR, folds=3, seed=2)
    assert a == b
