"""Challenger vs champion on the newest runtime rows: the decision ``iac retrain`` and the simulator share.

The rule (docs/iac.md, "Learning from the cluster"): the newest ``holdout_fraction`` of the usable
runtime rows by ``window_end`` (at least ``min_holdout``) are held out and never trained on; a
challenger is fitted on everything else (shipped, imported, older runtime rows); both it and the current
champion predict the held-out rows, and the challenger is promoted only if its MAPE there is lower.
With fewer runtime rows than the hold-out needs nothing is judged and the champion stays.

Pure: no MLflow, no I/O. ``registry.retrain`` wraps it with the logging and the aliases; the simulated
day (``sim.learning``) calls it every few simulated hours with the predictor the planner uses now as
the champion, so a Table-6 lookup or the contention model can be challenged as well as a registered
model. Both are scored through the ``SlowdownPredictor`` interface, i.e. as the planner would ask them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from elastico_core.iac.batch import PairBatch, ProfileBatch
from elastico_core.iac.dataset import CoLocationDataset, Samples, concat
from elastico_core.iac.evaluate import ModelReport, accuracy, cross_validate, fit_model
from elastico_core.iac.features import N_PER_JOB
from elastico_core.iac.learned import LearnedPredictor
from elastico_core.iac.models import ModelKind, SlowdownModel, make_model
from elastico_core.iac.predictor import SlowdownPredictor

HOLDOUT_FRACTION = 0.2  # the newest share of the usable runtime rows held out to judge on
MIN_HOLDOUT = 2  # fewest runtime rows a decision is made on


def split_newest(
    runtime: CoLocationDataset | None, fraction: float, minimum: int
) -> tuple[CoLocationDataset | None, CoLocationDataset | None]:
    """(older runtime rows, newest usable runtime rows) by window end; the newest ``fraction`` (at least ``minimum``)."""
    if runtime is None:
        return None, None
    frame = runtime.frame.with_row_index("_i")
    usable = frame.filter(pl.Series(runtime.usable_mask()) & (pl.col("source") == "runtime")).sort("window_end", "_i")
    n = usable.height
    k = max(minimum, math.ceil(fraction * n))
    if n < minimum or k >= n + 1:
        return runtime, None
    newest = set(usable["_i"].tail(k).to_list())
    mask = frame["_i"].is_in(list(newest))

    def part(m: pl.Series) -> CoLocationDataset:
        return CoLocationDataset(frame.filter(m).drop("_i"), runtime.origin)

    return (part(~mask) if (~mask).any() else None), part(mask)


def pair_batch(samples: Samples) -> PairBatch:
    """The planner's view of training samples: the per-job blocks of X and the keys, as a ``PairBatch``.

    Lets any ``SlowdownPredictor`` (a table, the contention model, a learned model) be scored on rows.
    """
    k = samples.keys
    a = ProfileBatch(k.workload_a, k.knobs_a, samples.X[:, :N_PER_JOB])
    b = ProfileBatch(k.workload_b, k.knobs_b, samples.X[:, N_PER_JOB : 2 * N_PER_JOB])
    return PairBatch(a, b, np.asarray(k.gpu_mem_mib, dtype=np.float64))


def score(predictor: SlowdownPredictor, samples: Samples) -> float | None:
    """MAPE (%) of ``predictor`` on ``samples`` (None when there are none)."""
    if len(samples) == 0:
        return None
    return accuracy(samples.y, np.asarray(predictor.predict(pair_batch(samples)), dtype=np.float64)).mape


@dataclass(frozen=True)
class Challenge:
    """What one retraining decided, and the challenger (None when there was nothing to train on)."""

    model: SlowdownModel | None
    cv: ModelReport | None  # grouped CV of the challenger's kind on its training rows (folds > 0)
    train: CoLocationDataset | None
    holdout: CoLocationDataset | None
    challenger_mape: float | None
    champion_mape: float | None
    promoted: bool
    reason: str

    @property
    def holdout_rows(self) -> int:
        return 0 if self.holdout is None else self.holdout.rows

    @property
    def train_rows(self) -> int:
        return 0 if self.train is None else self.train.rows

    def predictor(self, name: str = "learned") -> LearnedPredictor:
        """The challenger as the planner's predictor (with its calibrated bound when CV ran)."""
        if self.model is None:
            raise ValueError("no challenger was trained")
        return LearnedPredictor(self.model, name=name, bound=None if self.cv is None else self.cv.bound)


def challenge(
    data: CoLocationDataset | None,
    runtime: CoLocationDataset | None,
    champion: SlowdownPredictor | None,
    kind: ModelKind = ModelKind.CF,
    *,
    holdout_fraction: float = HOLDOUT_FRACTION,
    min_holdout: int = MIN_HOLDOUT,
    folds: int = 5,
    seed: int = 0,
    champion_label: str = "the champion",
) -> Challenge:
    """Fit a challenger on every row but the newest runtime ones; promote it only if it predicts those better.

    ``folds`` > 0 also cross-validates the challenger (grouped, at most one fold per workload pair): the
    CV figures and the calibration of its upper bound. ``champion`` None: the first model is promoted
    once it can be judged.
    """
    older, held = split_newest(runtime, holdout_fraction, min_holdout)
    parts = [d for d in (data, older) if d is not None]
    train = concat(parts) if parts else None
    samples = train.samples() if train is not None else None
    if samples is None or len(samples) == 0:
        why = "no usable co-located pairs" if held is None else f"the {held.rows} runtime rows are all held out to judge on"
        return Challenge(None, None, train, held, None, None, False, f"nothing to train on: {why}; {champion_label} stays")
    k = min(folds, len(set(samples.group.tolist())))
    cv = cross_validate(samples, kind, folds=k, seed=seed) if k >= 2 else None
    model = fit_model(make_model(kind, seed), samples)
    test = held.samples() if held is not None else None
    if held is None or test is None or not len(test):
        rows = 0 if runtime is None else runtime.rows
        reason = f"not judged: {rows} runtime rows, fewer than the {min_holdout} newest needed to hold out; {champion_label} stays"
        return Challenge(model, cv, train, held, None, None, False, reason)
    mine = score(LearnedPredictor(model, name="challenger"), test)
    theirs = score(champion, test) if champion is not None else None
    where = f"on the {held.rows} newest runtime rows"
    if champion is None:
        promoted, reason = True, f"first champion (MAPE {mine:.3f} % {where})"
    elif theirs is None or (mine is not None and mine < theirs):
        promoted, reason = True, f"MAPE {mine:.3f} % {where} beats {champion_label} ({theirs:.3f} %)"
    else:
        promoted, reason = False, f"MAPE {mine:.3f} % {where} does not beat {champion_label} ({theirs:.3f} %)"
    return Challenge(model, cv, train, held, mine, theirs, promoted, reason)
