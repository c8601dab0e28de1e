"""Slowdown regressors behind one scikit-learn interface: the MLP of §3.3.2, LightGBM, linear.

All three take X in ``features.FEATURE_NAMES`` layout (NaN allowed) and y = slowdown >= 1, learn in
log space (Eq. 10: log-scale MSE, so large slowdowns do not dominate), and predict values >= 1.
Preprocessing, fitted on the training rows only (``Preprocessor``): NaN -> the column's training
median (0 when a column is entirely unknown), ``log1p`` on the heavy-tailed columns (framebuffer,
throughput, micro-batch, ISL, OSL), then standardisation. ``__init__`` only stores parameters
(``sklearn.base.clone`` and ``get_params`` work); everything learned ends in ``_``.

Each fitted model exports its state as plain JSON + numpy arrays (``state()``/``from_state``) so a
registered model loads without pickle. The MLP trains in torch (float64) and predicts with numpy:
its eval graph (dropout off, BatchNorm and the input standardisation folded into the linear layers)
is three small float32 matmuls, which keeps an epoch's IAC step far below a millisecond and needs
no torch at planning time; ``predict_torch`` runs the torch graph for comparison.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Union

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

from elastico_core.iac.batch import PER_JOB_FEATURES
from elastico_core.iac.features import FEATURE_NAMES, N_FEATURES

LOG_COLUMNS = ("fb_used_mb", "throughput", "micro_batch", "isl", "osl")
_LOG_MASK = np.array([n[:2] in ("a_", "b_") and n[2:] in LOG_COLUMNS for n in FEATURE_NAMES])
_LOG_IDX = np.flatnonzero(_LOG_MASK)
assert _LOG_MASK.sum() == 2 * len(LOG_COLUMNS) and all(c in PER_JOB_FEATURES for c in LOG_COLUMNS)


class ModelKind(StrEnum):
    MLP = "mlp"
    LIGHTGBM = "lightgbm"
    LINEAR = "linear"
    CF = "cf"  # collaborative filtering over who meets whom (``iac.cf``); needs the pairs' keys


@dataclass(frozen=True, slots=True)
class Preprocessor:
    """Impute, log-compress and standardise feature columns with statistics of the training rows."""

    median: np.ndarray
    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, X: np.ndarray) -> Preprocessor:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: median NaN -> 0 below
            median = np.nanmedian(X, axis=0)
        median = np.where(np.isfinite(median), median, 0.0)
        Z = _impute_log(X, median)
        mean = Z.mean(axis=0)
        std = Z.std(axis=0)
        return cls(median, mean, np.where(std > 1e-12, std, 1.0))

    def transform(self, X: np.ndarray) -> np.ndarray:
        return (_impute_log(X, self.median) - self.mean) / self.scale

    def impute_log(self, X: np.ndarray) -> np.ndarray:
        """Imputation and log compression only (a linear first layer can absorb the standardisation)."""
        return _impute_log(X, self.median)

    def fold_into(self, w: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(W', b') with ``impute_log(X) @ W' + b' == transform(X) @ w + b``: one pass less per call."""
        return w / self.scale[:, None], b - (self.mean / self.scale) @ w

    def arrays(self) -> dict[str, np.ndarray]:
        return {"pre_median": self.median, "pre_mean": self.mean, "pre_scale": self.scale}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Preprocessor:
        return cls(arrays["pre_median"], arrays["pre_mean"], arrays["pre_scale"])


def _impute_log(X: np.ndarray, median: np.ndarray) -> np.ndarray:
    Z = np.where(np.isnan(X), median, X)
    Z[:, _LOG_IDX] = np.log1p(np.maximum(Z[:, _LOG_IDX], 0.0))
    return Z


def _check_xy(X: Any, y: Any | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    Xa = np.asarray(X, dtype=np.float64)
    if Xa.ndim != 2 or Xa.shape[0] == 0:
        raise ValueError(f"X must be a non-empty 2-D array, got shape {Xa.shape}")
    if Xa.shape[1] != N_FEATURES:
        raise ValueError(f"X must have the {N_FEATURES} IAC feature columns (features.FEATURE_NAMES), got {Xa.shape[1]}")
    if np.isinf(Xa).any():
        raise ValueError("X holds infinite values (NaN marks unknown, inf is a bug upstream)")
    if y is None:
        return Xa, None
    ya = np.asarray(y, dtype=np.float64).reshape(-1)
    if ya.shape[0] != Xa.shape[0]:
        raise ValueError(f"X has {Xa.shape[0]} rows, y has {ya.shape[0]}")
    if not np.isfinite(ya).all() or (ya <= 0).any():
        raise ValueError("slowdowns must be finite and > 0")
    return Xa, np.maximum(ya, 1.0)


class _SlowdownModel(RegressorMixin, BaseEstimator):  # type: ignore[misc]
    """Shared checks: fitted state, feature count, the >= 1 floor, finite output."""

    kind: ModelKind

    def _ready(self, X: Any) -> np.ndarray:
        if not hasattr(self, "pre_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted")
        Xa, _ = _check_xy(X)
        if Xa.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {Xa.shape[1]} features, the model was fitted on {self.n_features_in_}")
        return Xa

    def _transform(self, X: Any) -> np.ndarray:
        Xa = self._ready(X)
        return self.pre_.transform(Xa)

    @staticmethod
    def _finish(log_s: np.ndarray) -> np.ndarray:
        s = np.exp(np.clip(log_s, 0.0, 20.0))
        return np.where(np.isfinite(s), s, 1.0)


# ---- MLP (§3.3.2) -------------------------------------------------------------------------------
class MLPRegressor(_SlowdownModel):
    """Two hidden layers ReLU(BN(W h + b)) with dropout, output 1 + ReLU(W h + b) (Eq. 9), loss Eq. 10.

    Early stopping keeps the weights of the epoch with the lowest validation loss on a seeded random
    ``val_fraction`` of the training rows. Training is deterministic for a given ``random_state`` and
    torch thread count (CPU).

    :param hidden: widths of the two hidden layers
    :param dropout: dropout rate after each hidden layer (the paper's 0.2)
    :param lr: Adam learning rate
    :param weight_decay: Adam L2 penalty
    :param batch_size: mini-batch size
    :param max_epochs: upper bound on passes over the training rows
    :param patience: epochs without validation improvement before stopping
    :param val_fraction: share of rows (of workload pairs, when ``fit`` gets ``groups``) held out for early stopping
    :param random_state: seed of initialisation, shuffling and the validation split
    """

    kind = ModelKind.MLP

    def __init__(
        self,
        hidden: tuple[int, int] = (64, 32),
        dropout: float = 0.2,
        lr: float = 2e-3,
        weight_decay: float = 1e-4,
        batch_size: int = 64,
        max_epochs: int = 300,
        patience: int = 30,
        val_fraction: float = 0.2,
        random_state: int = 0,
    ) -> None:
        self.hidden = hidden
        self.dropout = dropout
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.val_fraction = val_fraction
        self.random_state = random_state

    def _network(self, n_in: int) -> Any:
        import torch
        from torch import nn

        h1, h2 = self.hidden
        net = nn.Sequential(
            nn.Linear(n_in, h1),
            nn.BatchNorm1d(h1),
            nn.ReLU(),
            nn.Dropout(self.dropout),
            nn.Linear(h1, h2),
            nn.BatchNorm1d(h2),
            nn.ReLU(),
            nn.Dropout(self.dropout),
            nn.Linear(h2, 1),
        )
        return net.to(torch.float64)

    def fit(self, X: Any, y: Any, groups: Any = None) -> MLPRegressor:
        """Train; with ``groups`` (workload pairs) the early-stopping split holds out whole groups."""
        import torch

        Xa, ya = _check_xy(X, y)
        assert ya is not None
        self.n_features_in_ = Xa.shape[1]
        self.pre_ = Preprocessor.fit(Xa)
        Z = self.pre_.transform(Xa)
        val, tr = _validation_split(Z.shape[0], self.val_fraction, self.random_state, groups)
        torch.manual_seed(self.random_state)
        gen = torch.Generator().manual_seed(self.random_state)
        net = self._network(Z.shape[1])
        with torch.no_grad():  # start at the mean slowdown: an output stuck below 0 gets no gradient
            net[-1].bias.fill_(float(np.exp(np.log(ya).mean()) - 1.0))
        opt = torch.optim.Adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        Zt, yt = torch.from_numpy(Z), torch.from_numpy(np.log(ya))
        best = (math.inf, {k: v.clone() for k, v in net.state_dict().items()}, 0)
        stale = 0
        for epoch in range(self.max_epochs):
            net.train()
            perm = tr[torch.randperm(len(tr), generator=gen).numpy()]
            for start in range(0, len(perm), self.batch_size):
                idx = perm[start : start + self.batch_size]
                if len(idx) < 2:
                    continue  # BatchNorm needs two rows
                opt.zero_grad()
                loss = _log_mse(net(Zt[idx]), yt[idx])
                loss.backward()
                opt.step()
            net.eval()
            with torch.no_grad():
                check = val if len(val) else tr
                v = float(_log_mse(net(Zt[check]), yt[check]))
            if v < best[0] - 1e-7:
                best, stale = (v, {k: t.clone() for k, t in net.state_dict().items()}, epoch + 1), 0
            else:
                stale += 1
                if stale >= self.patience:
                    break
        net.load_state_dict(best[1])
        net.eval()
        self.best_epoch_ = best[2]
        self.val_loss_ = best[0]
        self.weights_ = _fold(net)
        self.inference_ = _inference(self.pre_, self.weights_)
        self.net_ = net
        return self

    def predict(self, X: Any) -> np.ndarray:
        L = self.pre_.impute_log(self._ready(X)).astype(np.float32)
        w1, b1, w2, b2, w3, b3 = self._inference_weights()
        h = np.maximum(L @ w1 + b1, 0.0)
        h = np.maximum(h @ w2 + b2, 0.0)
        out = 1.0 + np.maximum(h @ w3 + b3, 0.0).astype(np.float64)  # Eq. 9
        return np.where(np.isfinite(out), out, 1.0).reshape(-1)

    def _inference_weights(self) -> tuple[np.ndarray, ...]:
        """float32 weights, layer 1 with the standardisation folded in (set by ``fit``/``from_state``)."""
        return self.inference_  # type: ignore[no-any-return]

    def predict_torch(self, X: Any) -> np.ndarray:
        """The same prediction through the torch graph (checks the folded numpy path)."""
        import torch

        Z = self._transform(X)
        with torch.no_grad():
            raw = self.net_(torch.from_numpy(Z)).numpy().reshape(-1)
        return 1.0 + np.maximum(raw, 0.0)

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        arrays = {**self.pre_.arrays(), **{f"w{i}": w for i, w in enumerate(self.weights_)}}
        return {"params": _jsonable(self.get_params()), "n_features": self.n_features_in_, "best_epoch": self.best_epoch_}, arrays

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> MLPRegressor:
        params = dict(meta["params"])
        params["hidden"] = tuple(params["hidden"])
        model = cls(**params)
        model.n_features_in_ = int(meta["n_features"])
        model.pre_ = Preprocessor.from_arrays(arrays)
        model.weights_ = tuple(arrays[f"w{i}"] for i in range(6))
        model.inference_ = _inference(model.pre_, model.weights_)
        model.best_epoch_ = int(meta.get("best_epoch", 0))
        return model


def _validation_split(n: int, fraction: float, seed: int, groups: Any) -> tuple[np.ndarray, np.ndarray]:
    """(validation, training) indices: a seeded share of rows, or of whole groups when given."""
    rng = np.random.default_rng(seed)
    if n < 20 or fraction <= 0:
        return np.arange(0), np.arange(n)
    if groups is None:
        order = rng.permutation(n)
        n_val = round(fraction * n)
        return np.sort(order[:n_val]), np.sort(order[n_val:])
    names, inverse = np.unique(np.asarray(groups).astype(str), return_inverse=True)
    if len(names) < 3:
        return _validation_split(n, fraction, seed, None)
    picked = rng.permutation(len(names))[: max(1, round(fraction * len(names)))]
    is_val = np.isin(inverse, picked)
    return np.flatnonzero(is_val), np.flatnonzero(~is_val)


def _log_mse(raw: Any, log_y: Any) -> Any:
    """Eq. 10 on the Eq. 9 output: mean (log(1 + ReLU(raw)) - log S)^2."""
    import torch

    pred = 1.0 + torch.relu(raw.reshape(-1))
    return torch.mean((torch.log(pred) - log_y) ** 2)


def _inference(pre: Preprocessor, weights: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    w1, b1 = pre.fold_into(weights[0], weights[1])
    return tuple(np.ascontiguousarray(w, dtype=np.float32) for w in (w1, b1, *weights[2:]))


def _fold(net: Any) -> tuple[np.ndarray, ...]:
    """Fold eval-mode BatchNorm into the preceding Linear: W' = W g/sqrt(v+eps), b' = (b-m) g/sqrt(v+eps) + beta."""
    out: list[np.ndarray] = []
    for lin, bn in ((net[0], net[1]), (net[4], net[5])):
        w = lin.weight.detach().numpy().astype(np.float64)
        b = lin.bias.detach().numpy().astype(np.float64)
        g = bn.weight.detach().numpy() / np.sqrt(bn.running_var.detach().numpy() + bn.eps)
        out.append((w * g[:, None]).T.copy())
        out.append((b - bn.running_mean.detach().numpy()) * g + bn.bias.detach().numpy())
    out.append(net[8].weight.detach().numpy().astype(np.float64).T.copy())
    out.append(net[8].bias.detach().numpy().astype(np.float64).copy())
    return tuple(out)


# ---- LightGBM ----------------------------------------------------------------------------------
class LightGBMRegressor(_SlowdownModel):
    """Gradient-boosted trees on log S (the paper compares XGBoost; LightGBM is the same family).

    :param n_estimators: boosting rounds
    :param learning_rate: shrinkage
    :param num_leaves: leaves per tree
    :param min_child_samples: rows per leaf at least
    :param subsample: row bagging fraction (every round)
    :param colsample_bytree: feature fraction per tree
    :param reg_lambda: L2 on leaf values
    :param n_jobs: threads
    :param random_state: seed (LightGBM runs in deterministic mode)
    """

    kind = ModelKind.LIGHTGBM

    def __init__(
        self,
        n_estimators: int = 100,
        learning_rate: float = 0.1,
        num_leaves: int = 7,
        min_child_samples: int = 10,
        subsample: float = 0.8,
        colsample_bytree: float = 0.9,
        reg_lambda: float = 1.0,
        n_jobs: int = 1,
        random_state: int = 0,
    ) -> None:
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.min_child_samples = min_child_samples
        self.subsample = subsample
        self.colsample_bytree = colsample_bytree
        self.reg_lambda = reg_lambda
        self.n_jobs = n_jobs
        self.random_state = random_state

    def fit(self, X: Any, y: Any) -> LightGBMRegressor:
        import lightgbm as lgb

        Xa, ya = _check_xy(X, y)
        assert ya is not None
        self.n_features_in_ = Xa.shape[1]
        self.pre_ = Preprocessor.fit(Xa)
        params = {
            "objective": "regression",
            "learning_rate": self.learning_rate,
            "num_leaves": self.num_leaves,
            "min_data_in_leaf": self.min_child_samples,
            "bagging_fraction": self.subsample,
            "bagging_freq": 1 if self.subsample < 1 else 0,
            "feature_fraction": self.colsample_bytree,
            "lambda_l2": self.reg_lambda,
            "num_threads": self.n_jobs,
            "seed": self.random_state,
            "deterministic": True,
            "force_row_wise": True,
            "verbosity": -1,
        }
        data = lgb.Dataset(self.pre_.transform(Xa), label=np.log(ya), params={"verbosity": -1})
        self.booster_ = lgb.train(params, data, num_boost_round=self.n_estimators)
        return self

    def predict(self, X: Any) -> np.ndarray:
        Z = self._transform(X)
        return self._finish(np.asarray(self.booster_.predict(Z, num_threads=self.n_jobs), dtype=np.float64))

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta = {"params": _jsonable(self.get_params()), "n_features": self.n_features_in_, "booster": self.booster_.model_to_string()}
        return meta, self.pre_.arrays()

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> LightGBMRegressor:
        import lightgbm as lgb

        model = cls(**meta["params"])
        model.n_features_in_ = int(meta["n_features"])
        model.pre_ = Preprocessor.from_arrays(arrays)
        model.booster_ = lgb.Booster(model_str=meta["booster"])
        return model


# ---- linear ------------------------------------------------------------------------------------
class LinearRegressor(_SlowdownModel):
    """Least squares on log S over the standardised features (a tiny ridge keeps it well-posed).

    :param alpha: ridge penalty per row on the standardised coefficients
    """

    kind = ModelKind.LINEAR

    def __init__(self, alpha: float = 1e-3) -> None:
        self.alpha = alpha

    def fit(self, X: Any, y: Any) -> LinearRegressor:
        Xa, ya = _check_xy(X, y)
        assert ya is not None
        self.n_features_in_ = Xa.shape[1]
        self.pre_ = Preprocessor.fit(Xa)
        Z = self.pre_.transform(Xa)
        t = np.log(ya)
        self.intercept_ = float(t.mean())
        gram = Z.T @ Z + self.alpha * Z.shape[0] * np.eye(Z.shape[1])
        self.coef_ = np.linalg.solve(gram, Z.T @ (t - self.intercept_))
        return self

    def predict(self, X: Any) -> np.ndarray:
        Z = self._transform(X)
        return self._finish(Z @ self.coef_ + self.intercept_)

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta = {"params": _jsonable(self.get_params()), "n_features": self.n_features_in_, "intercept": self.intercept_}
        return meta, {**self.pre_.arrays(), "coef": self.coef_}

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> LinearRegressor:
        model = cls(**meta["params"])
        model.n_features_in_ = int(meta["n_features"])
        model.pre_ = Preprocessor.from_arrays(arrays)
        model.coef_ = arrays["coef"]
        model.intercept_ = float(meta["intercept"])
        return model


if TYPE_CHECKING:
    from elastico_core.iac.cf import CFRegressor

SlowdownModel = Union[MLPRegressor, LightGBMRegressor, LinearRegressor, "CFRegressor"]
MODEL_CLASSES: dict[ModelKind, type[MLPRegressor] | type[LightGBMRegressor] | type[LinearRegressor]] = {
    ModelKind.MLP: MLPRegressor,
    ModelKind.LIGHTGBM: LightGBMRegressor,
    ModelKind.LINEAR: LinearRegressor,
}


def model_class(kind: ModelKind) -> Any:
    """The estimator class of ``kind`` (``cf`` lives in its own module, which builds on this one)."""
    if kind is ModelKind.CF:
        from elastico_core.iac.cf import CFRegressor

        return CFRegressor
    return MODEL_CLASSES[kind]


def make_model(kind: ModelKind, seed: int = 0, **params: Any) -> SlowdownModel:
    """A fresh, unfitted model of ``kind`` (``seed`` goes to ``random_state`` where there is one)."""
    if kind is not ModelKind.LINEAR:
        params.setdefault("random_state", seed)
    return model_class(kind)(**params)  # type: ignore[no-any-return]


def model_from_state(kind: ModelKind, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> SlowdownModel:
    return model_class(kind).from_state(meta, arrays)  # type: ignore[no-any-return]


def uses_keys(model: object) -> bool:
    """Whether ``model`` reads who meets whom (``PairKeys``) beside the features."""
    return getattr(model, "kind", None) is ModelKind.CF


def _jsonable(params: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}


assert len(FEATURE_NAMES) == N_FEATURES
