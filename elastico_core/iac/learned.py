"""A fitted slowdown model as the planner's ``SlowdownPredictor``."""

from __future__ import annotations

import logging
from collections.abc import Iterable
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
        """The point estimates and, for the factor model, which rows were cold starts (unknown workloads),
        from one pass over the batch."""
        return self._answer(batch, with_cold=True)

    def cold(self, batch: PairBatch) -> np.ndarray | None:
        """Which rows are cold starts (a workload the factor model never saw); None: the model cannot tell."""
        if len(batch) and uses_keys(self.model):
            try:
                return ~self.model.known(PairKeys.of_batch(batch))  # type: ignore[union-attr,no-any-return]
            except Exception:  # the point estimates stand; the bound then uses the factor rows' scores
                return None
        return None

    def unseen(self, workloads: Iterable[str]) -> frozenset[str]:
        """Of ``workloads``, those the factor model has no row for (their pairs are cold starts); none for a
        model that cannot tell."""
        vocab = getattr(self.model, "vocab_", None) if uses_keys(self.model) else None
        return frozenset() if not isinstance(vocab, dict) else frozenset(w for w in workloads if w not in vocab.get("w", {}))

    def exploring(self, assume: float, view: SlowdownPredictor | None = None) -> SlowdownPredictor:
        """``view`` (default: this predictor) with every cold-start pair answered by ``assume``
        (``ExploringPredictor``); itself where the model cannot tell which pairs are cold."""
        return ExploringPredictor(self if view is None else view, self, assume) if uses_keys(self.model) else (view or self)

    def predict(self, batch: PairBatch) -> np.ndarray:
        return self._answer(batch, with_cold=False)[0]

    def _answer(self, batch: PairBatch, *, with_cold: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Features built once, the model asked once (for the factor model with ``with_cold``, its estimates
        and which rows it knew, in one pass); a model that raises is answered by ``fallback`` (then nothing
        is known to be cold)."""
        if len(batch) == 0:
            return np.ones(0, dtype=np.float64), None
        X = batch_features(batch)
        X[np.isinf(X)] = np.nan  # an infinite counter is as good as unknown
        cold = None
        try:
            if uses_keys(self.model):
                keys = PairKeys.of_batch(batch)
                if with_cold:
                    out, known = self.model.predict_known(X, keys)  # type: ignore[union-attr]
                    cold = ~known
                else:
                    out = self.model.predict(X, keys)  # type: ignore[call-arg]
            else:
                out = self.model.predict(X)
            s = np.asarray(out, dtype=np.float64).reshape(-1)
            if s.shape[0] != len(batch):
                raise ValueError(f"model answered {s.shape[0]} rows for {len(batch)}")
        except Exception as exc:  # planning never fails because of the predictor
            log.warning("IAC model %s failed (%s: %s); answering with %s", self.name, type(exc).__name__, exc, self.fallback.name)
            s, cold = np.asarray(self.fallback.predict(batch), dtype=np.float64), None
        return np.where(np.isfinite(s), np.maximum(s, 1.0), 1.0), cold


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


@dataclass(frozen=True)
class ExploringPredictor:
    """Cold-start exploration: a pair the factor model has no row for (a workload it never saw) is
    planned as if it slowed each side by ``assume``; every other pair as ``view`` answers it.

    Why: for an unseen workload the model answers its training data's mean slowdown (Gavel's pairs,
    about 2x), above every job's tolerance, so a fresh install never co-locates a new workload, never
    measures it, and the runtime pairs that would teach the model never come. Assuming a tolerable
    slowdown lets the planner try such pairs; the cluster measures them, and from the next retraining
    (the ``iac_retrain`` DAG) the workload has a row of its own and this no longer applies to it. The
    exposure is one retraining period per new workload, within each job's tolerance as predicted.
    Pure, as the predictor contract asks: the same rows get the same answers until the model changes.
    """

    view: SlowdownPredictor  # answers known pairs: the point estimate, or its calibrated upper bound
    learned: LearnedPredictor  # says which pairs are cold starts
    assume: float = 1.2

    def __post_init__(self) -> None:
        if not (np.isfinite(self.assume) and self.assume >= 1.0):
            raise ValueError(f"an assumed cold-start slowdown must be a finite value >= 1, got {self.assume!r}")

    @property
    def name(self) -> str:
        return f"{self.view.name}+explore{self.assume:g}"

    def predict(self, batch: PairBatch) -> np.ndarray:
        if self.view is self.learned:  # the point estimate: one pass answers both
            s, cold = self.learned.predict_with_cold(batch)
        else:
            s, cold = np.asarray(self.view.predict(batch), dtype=np.float64), self.learned.cold(batch)
        return s if cold is None else np.where(cold, self.assume, s)
