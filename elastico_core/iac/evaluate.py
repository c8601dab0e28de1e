"""Grouped k-fold cross-validation of slowdown models, and the accuracy figures of Table 7.

A fold holds out whole workload pairs: the unordered pair of workload names (``Samples.group``),
whatever their configurations, GPUs or direction, is either all in train or all in test, so a model
is always scored on co-locations of workloads it never saw *together*.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from elastico_core.iac.conformal import UpperBound, coverage
from elastico_core.iac.dataset import PairType, Samples
from elastico_core.iac.models import MLPRegressor, ModelKind, SlowdownModel, make_model, uses_keys
from elastico_core.model.errors import SpecError

MODERATE_DECAY = (0.6, 0.9)  # Table 6's moderate-conflict regime, decay = 1 / slowdown
COVERAGE_LEVELS = (0.8, 0.9, 0.95)  # nominal levels of the upper bound whose held-out coverage is reported


@dataclass(frozen=True, slots=True)
class Fold:
    train: np.ndarray  # sample indices
    test: np.ndarray


def grouped_folds(groups: np.ndarray, k: int, seed: int = 0) -> tuple[Fold, ...]:
    """k folds over whole groups: shuffle groups (seeded), then give the next-largest to the smallest fold."""
    names, inverse, counts = np.unique(np.asarray(groups).astype(str), return_inverse=True, return_counts=True)
    if k < 2:
        raise SpecError(f"need at least 2 folds, got {k}", field="folds")
    if len(names) < k:
        raise SpecError(f"{len(names)} workload pairs cannot fill {k} folds (a pair never spans train and test)", field="folds")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(names))
    order = order[np.argsort(-counts[order], kind="stable")]  # largest first, ties in seeded order
    load = np.zeros(k, dtype=np.int64)
    fold_of = np.empty(len(names), dtype=np.int64)
    for g in order:
        f = int(np.argmin(load))
        fold_of[g] = f
        load[f] += counts[g]
    sample_fold = fold_of[inverse]
    idx = np.arange(len(sample_fold))
    return tuple(Fold(idx[sample_fold != f], idx[sample_fold == f]) for f in range(k))


@dataclass(frozen=True, slots=True)
class Accuracy:
    mape: float | None  # percent, on slowdown
    r2: float | None
    samples: int

    def as_dict(self) -> dict[str, Any]:
        return {"mape": self.mape, "r2": self.r2, "samples": self.samples}


@dataclass(frozen=True, slots=True)
class ModelReport:
    """Out-of-fold accuracy of one model: overall, by co-location type, and on moderate pairs."""

    overall: Accuracy
    by_type: tuple[tuple[str, Accuracy], ...]
    moderate_mape: float | None
    moderate_samples: int
    synthetic_samples: int  # > 0: the figures include synthetic rows and are not a measured accuracy
    coverage: tuple[tuple[float, float], ...] = ()  # (nominal level, share of held-out pairs under the bound)
    bound: UpperBound | None = field(default=None, compare=False)  # calibrated on the out-of-fold residuals

    def as_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall.as_dict(),
            "by_type": {t: a.as_dict() for t, a in self.by_type},
            "moderate_mape": self.moderate_mape,
            "bound_coverage": {f"{lv:g}": round(c, 4) for lv, c in self.coverage},
        }


def accuracy(y: np.ndarray, pred: np.ndarray) -> Accuracy:
    n = len(y)
    if n == 0:
        return Accuracy(None, None, 0)
    mape = float(np.mean(np.abs(pred - y) / y) * 100.0)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - pred) ** 2)) / ss_tot if ss_tot > 0 else None
    return Accuracy(round(mape, 3), None if r2 is None else round(r2, 4), n)


def report(samples: Samples, pred: np.ndarray, fold_of: np.ndarray | None = None, cold: np.ndarray | None = None) -> ModelReport:
    """Accuracy of ``pred``; with ``fold_of`` (out-of-fold predictions) also the bound and its held-out coverage."""
    y = samples.y
    by_type = tuple((t, accuracy(y[samples.pair_type == t], pred[samples.pair_type == t])) for t in PairType.LABELS)
    decay = 1.0 / y
    moderate = (decay >= MODERATE_DECAY[0]) & (decay <= MODERATE_DECAY[1])
    mod = accuracy(y[moderate], pred[moderate])
    cov: tuple[tuple[float, float], ...] = ()
    bound = None
    if fold_of is not None and len(y):
        cov = tuple((lv, coverage(y, pred, fold_of, lv)) for lv in COVERAGE_LEVELS)
        bound = UpperBound.of(np.log(y) - np.log(pred), None if cold is None else np.log(y) - np.log(cold))
    return ModelReport(accuracy(y, pred), by_type, mod.mape, mod.samples, int(samples.synthetic.sum()), cov, bound)


def out_of_fold(
    samples: Samples, make: Callable[[], SlowdownModel], folds: Sequence[Fold]
) -> np.ndarray:
    """Each sample predicted by the model trained on the folds that do not hold its workload pair."""
    return out_of_fold_both(samples, make, folds)[0]


def out_of_fold_both(
    samples: Samples, make: Callable[[], SlowdownModel], folds: Sequence[Fold]
) -> tuple[np.ndarray, np.ndarray | None]:
    """``out_of_fold``, and for the factor model also its cold-start (feature) model's predictions."""
    pred = np.full(len(samples), np.nan)
    cold: np.ndarray | None = None
    for fold in folds:
        model = fit_model(make(), samples, fold.train)
        pred[fold.test] = predict_samples(model, samples, fold.test)
        if uses_keys(model):
            cold = np.full(len(samples), np.nan) if cold is None else cold
            cold[fold.test] = model.predict_cold(samples.X[fold.test], samples.keys.take(fold.test))  # type: ignore[union-attr]
    return pred, cold


def fold_index(folds: Sequence[Fold], n: int) -> np.ndarray:
    """The fold of every sample (its test fold)."""
    out = np.full(n, -1, dtype=np.int64)
    for i, fold in enumerate(folds):
        out[fold.test] = i
    return out


def fit_model(model: SlowdownModel, samples: Samples, rows: np.ndarray | None = None) -> SlowdownModel:
    """Fit on ``rows`` (all by default); the MLP also gets the groups for a grouped early-stopping split,
    the collaborative-filtering model the pairs' keys."""
    idx = np.arange(len(samples)) if rows is None else rows
    if isinstance(model, MLPRegressor):
        return model.fit(samples.X[idx], samples.y[idx], groups=samples.group[idx])
    if uses_keys(model):
        return model.fit(samples.X[idx], samples.y[idx], keys=samples.keys.take(idx))  # type: ignore[call-arg]
    return model.fit(samples.X[idx], samples.y[idx])


def predict_samples(model: SlowdownModel, samples: Samples, rows: np.ndarray | None = None) -> np.ndarray:
    """Predicted slowdowns of ``rows`` (all by default), with the keys where the model reads them."""
    idx = np.arange(len(samples)) if rows is None else rows
    if uses_keys(model):
        return np.asarray(model.predict(samples.X[idx], samples.keys.take(idx)))  # type: ignore[call-arg]
    return np.asarray(model.predict(samples.X[idx]))


def cross_validate(samples: Samples, kind: ModelKind, *, folds: int = 5, seed: int = 0, **params: Any) -> ModelReport:
    """Grouped k-fold CV of one model kind (the same folds for every kind under the same seed)."""
    split = grouped_folds(samples.group, folds, seed)
    pred, cold = out_of_fold_both(samples, lambda: make_model(kind, seed, **params), split)
    return report(samples, pred, fold_index(split, len(samples)), cold)


@dataclass(frozen=True, slots=True)
class Evaluation:
    models: tuple[tuple[ModelKind, ModelReport], ...]
    folds: int
    seed: int

    @property
    def best(self) -> ModelKind:
        """Lowest overall MAPE (ties: the order given)."""
        return min(self.models, key=lambda kv: kv[1].overall.mape if kv[1].overall.mape is not None else np.inf)[0]

    def as_dict(self) -> dict[str, Any]:
        return {"models": {k.value: r.as_dict() for k, r in self.models}, "best": self.best.value}


def evaluate(
    samples: Samples, kinds: Sequence[ModelKind], *, folds: int = 5, seed: int = 0, params: dict[ModelKind, dict[str, Any]] | None = None
) -> Evaluation:
    """Cross-validate several model kinds on the same grouped folds."""
    if len(samples) == 0:
        raise SpecError("no feasible co-located pairs to learn from", field="data")
    params = params or {}
    reports = tuple((k, cross_validate(samples, k, folds=folds, seed=seed, **params.get(k, {}))) for k in kinds)
    return Evaluation(reports, folds, seed)


def leave_one_pair_out(groups: np.ndarray) -> int:
    """The fold count that holds out one workload pair at a time (for small measured sets)."""
    return len(np.unique(np.asarray(groups).astype(str)))


@dataclass(frozen=True, slots=True)
class Transfer:
    """Models fitted on one dataset and scored on another (the bound calibrated by grouped CV on the first)."""

    models: tuple[tuple[ModelKind, ModelReport], ...]
    train_samples: int
    test_samples: int
    unseen_rows: int  # test rows whose workloads the training set never saw (cold starts for the factor model)

    @property
    def best(self) -> ModelKind:
        return min(self.models, key=lambda kv: kv[1].overall.mape if kv[1].overall.mape is not None else np.inf)[0]

    def as_dict(self) -> dict[str, Any]:
        return {"models": {k.value: r.as_dict() for k, r in self.models}, "best": self.best.value,
                "train_samples": self.train_samples, "test_samples": self.test_samples, "unseen_rows": self.unseen_rows}


def transfer(
    train: Samples, test: Samples, kinds: Sequence[ModelKind], *, folds: int = 5, seed: int = 0,
    params: dict[ModelKind, dict[str, Any]] | None = None,
) -> Transfer:
    """Train on ``train``, predict ``test``: accuracy there, and the coverage of a bound calibrated on ``train``."""
    if len(train) == 0 or len(test) == 0:
        raise SpecError("both the training and the test data need feasible co-located pairs", field="data")
    params = params or {}
    k = min(folds, leave_one_pair_out(train.group))
    seen = set(train.keys.workload_a.tolist())
    unseen = ~(np.isin(test.keys.workload_a, list(seen)) & np.isin(test.keys.workload_b, list(seen)))
    out = []
    for kind in kinds:
        calib = cross_validate(train, kind, folds=k, seed=seed, **params.get(kind, {})) if k >= 2 else None
        model = fit_model(make_model(kind, seed, **params.get(kind, {})), train)
        pred = predict_samples(model, test)
        rep = report(test, pred)
        if calib is not None and calib.bound is not None:
            cov = tuple((lv, float(np.mean(test.y <= calib.bound.upper(pred, lv, unseen) * (1 + 1e-12)))) for lv in COVERAGE_LEVELS)
            rep = ModelReport(rep.overall, rep.by_type, rep.moderate_mape, rep.moderate_samples, rep.synthetic_samples, cov, calib.bound)
        out.append((kind, rep))
    return Transfer(tuple(out), len(train), len(test), int(unseen.sum()))
