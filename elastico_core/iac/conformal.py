"""How sure IAC is: a calibrated upper bound on each predicted slowdown (one-sided split conformal).

The scores are the log residuals ``log S - log Ŝ`` of *held-out* pairs: grouped cross-validation
predicts every measured pair with a model that never saw those two workloads together, which is the
situation the planner is in with a pair it has not measured. For a nominal level ``p`` the bound is

    U_p = Ŝ · exp(q),   q = the ceil((n + 1) p)-th smallest of the n scores

so a new pair exchangeable with the calibration pairs has ``S <= U_p`` with probability at least
``p`` (Vovk et al.; with CV residuals the CV+ argument of Barber et al. gives ``2p - 1`` in the worst
case and ``p`` in practice, which ``coverage`` checks on held-out pairs). Rows the factor model cannot
answer (a workload it never saw) are predicted by its feature model and use that model's scores.

Why not MAPIE (the maintained scikit-learn conformal library): its regressors give two-sided
intervals from an estimator's ``fit``/``predict``, and its CV+ bounds need the k fold models at
prediction time (k times the planner's cost per epoch); the planner wants one-sided bounds at any
level from stored numbers, which is the quantile above over scores this project's own grouped CV
already computes. The scores travel with the model file, so any level can be asked later.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_LEVEL = 0.9


@dataclass(frozen=True, slots=True, eq=False)
class UpperBound:
    """Calibration scores (sorted log residuals) of the factor model's rows and of its cold-start rows."""

    known: np.ndarray
    cold: np.ndarray

    @classmethod
    def of(cls, known: np.ndarray, cold: np.ndarray | None = None) -> UpperBound:
        k = np.sort(np.asarray(known, dtype=np.float64)[np.isfinite(known)])
        c = k if cold is None else np.sort(np.asarray(cold, dtype=np.float64)[np.isfinite(cold)])
        return cls(k, c)

    def margin(self, level: float, *, cold: bool = False) -> float:
        """q of the module doc: the log-space margin that covers ``level`` of new pairs (inf if too few scores)."""
        return conformal_quantile(self.cold if cold else self.known, level)

    def upper(self, pred: np.ndarray, level: float, cold: np.ndarray | None = None) -> np.ndarray:
        """U_level for predictions ``pred`` (rows flagged in ``cold`` use the cold-start scores); never below ``pred``."""
        p = np.asarray(pred, dtype=np.float64)
        q = np.full(p.shape, max(self.margin(level), 0.0))
        if cold is not None and cold.any():
            q[cold] = max(self.margin(level, cold=True), 0.0)
        return p * np.exp(np.minimum(q, 20.0))

    def arrays(self) -> dict[str, np.ndarray]:
        return {"bound_known": self.known, "bound_cold": self.cold}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> UpperBound | None:
        if "bound_known" not in arrays:
            return None
        return cls(np.asarray(arrays["bound_known"]), np.asarray(arrays.get("bound_cold", arrays["bound_known"])))


def conformal_quantile(scores: np.ndarray, level: float) -> float:
    """The ceil((n + 1) level)-th smallest score (inf when n is too small for that level)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"a coverage level lies in (0, 1), got {level!r}")
    s = np.sort(np.asarray(scores, dtype=np.float64))
    k = math.ceil((len(s) + 1) * level)
    return float(s[k - 1]) if 0 < k <= len(s) else math.inf


def coverage(y: np.ndarray, pred: np.ndarray, fold_of: np.ndarray, level: float) -> float:
    """Share of held-out pairs under their bound: each fold's bound calibrated on the *other* folds' scores."""
    scores = np.log(np.asarray(y, dtype=np.float64)) - np.log(np.asarray(pred, dtype=np.float64))
    hit = np.zeros(len(scores), dtype=bool)
    for f in np.unique(fold_of):
        test = fold_of == f
        q = conformal_quantile(scores[~test], level)
        hit[test] = scores[test] <= max(q, 0.0) + 1e-12
    return float(hit.mean()) if len(hit) else math.nan
