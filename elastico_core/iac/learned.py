"""A fitted slowdown model as the planner's ``SlowdownPredictor``."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from elastico_core.iac.batch import PairBatch
from elastico_core.iac.features import N_FEATURES, batch_features
from elastico_core.iac.models import SlowdownModel
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

    def __post_init__(self) -> None:
        n = getattr(self.model, "n_features_in_", None)
        if n != N_FEATURES:
            raise ValueError(f"the model must be fitted on the {N_FEATURES} IAC features, got {n}")

    def predict(self, batch: PairBatch) -> np.ndarray:
        if len(batch) == 0:
            return np.ones(0, dtype=np.float64)
        X = batch_features(batch)
        X[np.isinf(X)] = np.nan  # an infinite counter is as good as unknown
        try:
            s = np.asarray(self.model.predict(X), dtype=np.float64).reshape(-1)
            if s.shape[0] != len(batch):
                raise ValueError(f"model answered {s.shape[0]} rows for {len(batch)}")
        except Exception as exc:  # planning never fails because of the predictor
            log.warning("IAC model %s failed (%s: %s); answering with %s", self.name, type(exc).__name__, exc, self.fallback.name)
            s = np.asarray(self.fallback.predict(batch), dtype=np.float64)
        return np.where(np.isfinite(s), np.maximum(s, 1.0), 1.0)
