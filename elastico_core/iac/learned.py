"""A fitted slowdown model as the planner's ``SlowdownPredictor``."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from elastico_core.iac.batch import PairBatch
from elastico_core.iac.cf import PairKeys
from elastico_core.iac.conformal import DEFAULT_LEVEL, UpperBound
from elastico_core.iac.features import N_FEATURES, batch_features
from elastico_core.iac.models import SlowdownModel, uses_keys
from elastico_core.iac.predictor import NoInterference, SlowdownPredictor

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LearnedPredictor:
    """Builds the §3.3.1 features of every pair in a batch and asks the model, in one call.

    The answer is always finite and >= 1 (NaN or < 1 from the model become 1, i.e. "no evidence of
    interference"), and a model that raises does not stop planning: the batch is answered by
    ``fallback`` and the failure logged.
    """

    model: SlowdownModel
    name: str = "learned"
    fallback: SlowdownPredictor = field(default_factory=NoInterference)
    bound: UpperBound | None = None  # calibration of its upper bound, when the model was trained with one

    def __post_init__(self) -> None:
        n = getattr(self.model, "n_features_in_", None)
        if n != N_FEATURES:
            raise ValueError(f"the model must be fitted on the {N_FEATURES} IAC features, got {n}")

    def upper(self, level: float = DEFAULT_LEVEL) -> SlowdownPredictor:
        """The predictor of the calibrated upper bound at ``level`` (the point estimate itself without a bound)."""
        return self if self.bound is None else UpperBoundPredictor(self, level)

    def predict_with_cold(self, batch: PairBatch) -> tuple[np.ndarray, np.ndarray | None]:
        """The point estimates and, for the factor model, which rows were cold starts (unknown workloads)."""
        s = self.predict(batch)
        if len(batch) and uses_keys(self.model):
            try:
                return s, ~self.model.known(PairKeys.of_batch(batch))  # type: ignore[union-attr]
            except Exception:  # the point estimates stand; the bound then uses the factor rows' scores
                return s, None
        return s, None

    def predict(self, batch: PairBatch) -> np.ndarray:
        if len(batch) == 0:
            return np.ones(0, dtype=np.float64)
        X = batch_features(batch)
        X[np.isinf(X)] = np.nan  # an infinite counter is as good as unknown
        try:
            if uses_keys(self.model):
                s = np.asarray(self.model.predict(X, PairKeys.of_batch(batch)), dtype=np.float64).reshape(-1)  # type: ignore[call-arg]
            else:
                s = np.asarray(self.model.predict(X), dtype=np.float64).reshape(-1)
            if s.shape[0] != len(batch):
                raise ValueError(f"model answered {s.shape[0]} rows for {len(batch)}")
        except Exception as exc:  # planning never fails because of the predictor
            log.warning("IAC model %s failed (%s: %s); answering with %s", self.name, type(exc).__name__, exc, self.fallback.name)
            s = np.asarray(self.fallback.predict(batch), dtype=np.float64)
        return np.where(np.isfinite(s), np.maximum(s, 1.0), 1.0)


@dataclass(frozen=True)
class UpperBoundPredictor:
    """S_upper(a|b): the learned predictor's calibrated upper bound at ``level`` (``iac.conformal``).

    What a planner that checks tolerances against the bound asks (``ElasticoRules.iac_bound``); the
    same contract as every predictor: finite values >= 1, one per row, no per-call state.
    """

    base: LearnedPredictor
    level: float = DEFAULT_LEVEL

    @property
    def name(self) -> str:
        return f"{self.base.name}@upper{self.level:g}"

    def predict(self, batch: PairBatch) -> np.ndarray:
        s, cold = self.base.predict_with_cold(batch)
        if self.base.bound is None or len(s) == 0:
            return s
        return np.where(np.isfinite(u := self.base.bound.upper(s, self.level, cold)), np.maximum(u, s), s)
