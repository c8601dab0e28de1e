"""Collaborative filtering over who meets whom: per-workload sensitivity and pressure, learned from pairs.

Gavel's pairs (and a cluster's own) are dominated by *which job meets which*: a recommendation job
on a V100 is slowed 10-60x by almost any partner, a ResNet-50 presses every partner harder than an
LSTM does. Hardware counters (unknown there) cannot see it, and a tree model over the 46 features
only finds it by recognising jobs from their parameter count and throughput. Schedulers that learned
interference from sparse pair matrices (Paragon, Quasar) completed the matrix instead: each job's row
and column are learned from the partners it *was* measured with, and a pair never measured together
is predicted from them. This model does that, in log space (Eq. 10's scale):

    log S(a|b on g) = mu + gpu_g
                      + sens_w(a) + sens_wg(a, g) + sens_jg(a, g)      how much a suffers (its rows)
                      + press_w(b) + press_wg(b, g) + press_jg(b, g)   how hard b presses (its columns)
                      + <u_wg(a, g), v_wg(b, g)>                       which-meets-which (rank ``rank``)

with three levels per side: the workload (``w``), the workload on that GPU (``wg``) and the job type,
i.e. the workload at its configuration, on that GPU (``jg``). Each level's effects are L2-shrunk to
0, so a job type measured with few partners leans on its workload, and a workload on a GPU it was
never measured on leans on its other GPUs: a hierarchical prior, fitted jointly. A GPU is keyed by its
device memory (MiB, rounded), what both a dataset row and the planner's ``PairBatch`` carry.

Cold start: a pair with a workload never seen has no row or column to read for that side. By default
(``cold="prior"``) the unseen side's effects take their prior, 0, so the pair is predicted from the GPU's
level and whatever the known side carries; a GPU never seen adds nothing either. ``cold="features"``
answers such pairs with a LightGBM on the 46 features instead (fitted on the same rows either way): on
public data without counters it extrapolates throughputs measured in another unit (Gavel's steps/s
against the H200 pairs' samples/s) into slowdowns in the tens, so the prior is the default (docs/iac.md
compares both on every cold-start test). From its first measured pairs on, a new
workload gets a row of its own.

Fitting is full-batch Adam in torch (float64, seeded); the learning rate decays to 1 % of ``lr`` along
a cosine over the ``epochs`` steps (``lr_decay``): the ``ape`` loss is not smooth, and at a constant
rate the effects end wherever the last steps' jitter left them (about 0.1 point of CV MAPE). Each
level's shrinkage is ``l2`` times its ``level_l2`` factor: the workload-on-GPU effects are shrunk 10x
less than the others, since a workload's sensitivity and pressure differ a lot from GPU to GPU
(Gavel's V100 against its K80 and P100); docs/iac.md compares the factors. The loss is ``loss``. Default ``ape``,
|Ŝ - S| / S: the error the accuracy figures count, whose minimiser sits below the median of a
pair's spread (so the point estimate leans low where the data are noisy: Gavel's V100 rows); the
planner's protection against that is the calibrated upper bound (``iac.conformal``, the
``ElasticoRules.iac_bound`` rule), not a biased point estimate. ``log_l1`` (the median of log S) and
``log_l2`` (Eq. 10) are the alternatives; docs/iac.md compares them. ``rank`` > 0 adds the low-rank
interaction; on Gavel it overfits (docs/iac.md), so the default is 0. Prediction is numpy: one dict
lookup per distinct (workload, configuration, GPU) and a few vector sums, no torch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from elastico_core.iac.batch import PairBatch
from elastico_core.iac.models import LightGBMRegressor, ModelKind, _check_xy, _jsonable, _SlowdownModel

LEVELS = ("w", "wg", "jg")
LOSSES = ("log_l2", "log_l1", "log_huber", "ape")
LEVEL_L2 = (1.0, 0.1, 1.0)  # shrinkage factors of the w, wg, jg effects: a workload on a GPU is shrunk least
COLD_STARTS = ("prior", "features")  # an unseen workload: its effects' prior (0), or a LightGBM on the 46 features
Entity = tuple[str, str, int]  # workload, canonical knob JSON, GPU memory (MiB, rounded)


def canonical_knobs(text: object) -> str:
    """A knob JSON object in canonical form (sorted keys, no spaces): the planner's ``Knobs.to_json``."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return "{}"
    try:
        return json.dumps(json.loads(str(text)), sort_keys=True, separators=(",", ":"))
    except (ValueError, TypeError):
        return str(text)


@dataclass(frozen=True, slots=True, eq=False)
class PairKeys:
    """Who is in each row: the predicted job ``a``, its partner ``b``, the GPU they share (by memory)."""

    workload_a: np.ndarray  # str (object)
    knobs_a: np.ndarray  # canonical knob JSON (object)
    workload_b: np.ndarray
    knobs_b: np.ndarray
    gpu_mem_mib: np.ndarray  # float

    def __len__(self) -> int:
        return int(self.workload_a.shape[0])

    @classmethod
    def of_batch(cls, batch: PairBatch) -> PairKeys:
        return cls(batch.a.workload, batch.a.knobs_key, batch.b.workload, batch.b.knobs_key,
                   np.broadcast_to(np.asarray(batch.gpu_mem_mib, dtype=np.float64), (len(batch),)))

    def take(self, index: np.ndarray) -> PairKeys:
        return PairKeys(self.workload_a[index], self.knobs_a[index], self.workload_b[index], self.knobs_b[index],
                        self.gpu_mem_mib[index])

    def swapped(self) -> PairKeys:
        return PairKeys(self.workload_b, self.knobs_b, self.workload_a, self.knobs_a, self.gpu_mem_mib)

    def entities(self, side: str) -> list[Entity]:
        w, k = (self.workload_a, self.knobs_a) if side == "a" else (self.workload_b, self.knobs_b)
        g = np.rint(self.gpu_mem_mib).astype(np.int64).tolist()
        return list(zip(w.tolist(), k.tolist(), g, strict=True))


def _level_key(e: Entity, level: str) -> str:
    if level == "w":
        return e[0]
    if level == "wg":
        return f"{e[0]}@{e[2]}"
    return f"{e[0]}|{e[1]}@{e[2]}"


class CFRegressor(_SlowdownModel):
    """Hierarchical sensitivity/pressure effects plus a low-rank interaction (module doc); the prior for cold starts.

    :param rank: width of the which-meets-which embeddings at the workload-on-GPU level (0: effects only)
    :param l2: L2 shrinkage of every effect and embedding (divided by the number of training rows)
    :param level_l2: factors on ``l2`` for the effects of the levels ``w``, ``wg``, ``jg`` (in that order)
    :param loss: ``log_l1`` (median of log S), ``log_l2`` (Eq. 10), ``log_huber``, or ``ape`` (|Ŝ - S| / S)
    :param epochs: full-batch Adam steps
    :param lr: Adam learning rate (the first step's, with ``lr_decay``)
    :param lr_decay: decay the learning rate along a cosine to 1 % of ``lr`` so the fit settles
    :param random_state: seed of the embeddings' initialisation and of the feature model
    :param cold: how a pair with an unseen workload is answered: ``prior`` (its effects are 0) or ``features``
    """

    kind = ModelKind.CF

    def __init__(self, rank: int = 0, l2: float = 10.0, loss: str = "ape", epochs: int = 400, lr: float = 0.05,
                 random_state: int = 0, cold: str = "prior", level_l2: tuple[float, float, float] = LEVEL_L2,
                 lr_decay: bool = True) -> None:
        self.cold = cold
        self.rank = rank
        self.l2 = l2
        self.level_l2 = level_l2
        self.lr_decay = lr_decay
        self.loss = loss
        self.epochs = epochs
        self.lr = lr
        self.random_state = random_state

    # ---- fitting --------------------------------------------------------------------------------
    def fit(self, X: Any, y: Any, keys: PairKeys | None = None) -> CFRegressor:
        import torch

        if keys is None:
            raise ValueError("CFRegressor.fit needs the pairs' keys (who met whom): pass keys=PairKeys")
        if self.loss not in LOSSES:
            raise ValueError(f"unknown loss {self.loss!r} (want one of {list(LOSSES)})")
        if self.cold not in COLD_STARTS:
            raise ValueError(f"unknown cold start {self.cold!r} (want one of {list(COLD_STARTS)})")
        if len(self.level_l2) != len(LEVELS) or min(self.level_l2) < 0:
            raise ValueError(f"level_l2 needs {len(LEVELS)} non-negative factors (w, wg, jg), got {self.level_l2!r}")
        Xa, ya = _check_xy(X, y)
        assert ya is not None
        if len(keys) != Xa.shape[0]:
            raise ValueError(f"keys have {len(keys)} rows, X has {Xa.shape[0]}")
        self.n_features_in_ = Xa.shape[1]
        self.cold_ = LightGBMRegressor(random_state=self.random_state).fit(Xa, ya)
        self.pre_ = self.cold_.pre_
        ents_a, ents_b = keys.entities("a"), keys.entities("b")
        vocab: dict[str, dict[str, int]] = {lv: {} for lv in LEVELS}
        for e in (*ents_a, *ents_b):
            for lv in LEVELS:
                vocab[lv].setdefault(_level_key(e, lv), len(vocab[lv]))
        gpus: dict[int, int] = {}
        for e in ents_a:
            gpus.setdefault(e[2], len(gpus))
        idx_a = {lv: torch.tensor([vocab[lv][_level_key(e, lv)] for e in ents_a]) for lv in LEVELS}
        idx_b = {lv: torch.tensor([vocab[lv][_level_key(e, lv)] for e in ents_b]) for lv in LEVELS}
        g_idx = torch.tensor([gpus[e[2]] for e in ents_a])
        t = torch.from_numpy(np.log(ya))
        gen = torch.Generator().manual_seed(self.random_state)
        f64 = torch.float64
        sens = {lv: torch.zeros(len(vocab[lv]), dtype=f64, requires_grad=True) for lv in LEVELS}
        press = {lv: torch.zeros(len(vocab[lv]), dtype=f64, requires_grad=True) for lv in LEVELS}
        gpu_b = torch.zeros(len(gpus), dtype=f64, requires_grad=True)
        width = max(self.rank, 1)
        u = (0.1 * torch.randn(len(vocab["wg"]), width, generator=gen, dtype=f64)).requires_grad_(self.rank > 0)
        v = (0.1 * torch.randn(len(vocab["wg"]), width, generator=gen, dtype=f64)).requires_grad_(self.rank > 0)
        mu = float(t.median() if self.loss == "log_l1" else t.mean())
        params = [*sens.values(), *press.values(), gpu_b] + ([u, v] if self.rank > 0 else [])
        opt = torch.optim.Adam(params, lr=self.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, self.epochs, eta_min=0.01 * self.lr) if self.lr_decay else None
        scale = self.l2 / len(t)
        factor = dict(zip(LEVELS, (float(f) for f in self.level_l2), strict=True))

        def forward() -> Any:
            out = mu + gpu_b[g_idx]
            for lv in LEVELS:
                out = out + sens[lv][idx_a[lv]] + press[lv][idx_b[lv]]
            if self.rank > 0:
                out = out + (u[idx_a["wg"]] * v[idx_b["wg"]]).sum(dim=1)
            return out

        for _ in range(self.epochs):
            opt.zero_grad()
            err = forward() - t
            if self.loss == "log_l2":
                fit_loss = (err**2).mean()
            elif self.loss == "log_l1":
                fit_loss = err.abs().mean()
            elif self.loss == "log_huber":
                fit_loss = torch.nn.functional.huber_loss(err, torch.zeros_like(err), delta=0.2)
            else:  # |S_hat - S| / S: the error MAPE counts, on the slowdown itself
                fit_loss = (torch.expm1(torch.clamp(err, max=20.0))).abs().mean()
            reg = sum(factor[lv] * ((sens[lv] ** 2).sum() + (press[lv] ** 2).sum()) for lv in LEVELS)
            if self.rank > 0:
                reg = reg + (u**2).sum() + (v**2).sum()
            (fit_loss + scale * reg).backward()
            opt.step()
            if sched is not None:
                sched.step()
        self.mu_ = mu
        self.vocab_ = vocab
        self.gpus_ = {str(k): i for k, i in gpus.items()}
        self.sens_ = {lv: sens[lv].detach().numpy().copy() for lv in LEVELS}
        self.press_ = {lv: press[lv].detach().numpy().copy() for lv in LEVELS}
        self.gpu_bias_ = gpu_b.detach().numpy().copy()
        self.u_ = u.detach().numpy().copy() if self.rank > 0 else np.zeros((len(vocab["wg"]), 0))
        self.v_ = v.detach().numpy().copy() if self.rank > 0 else np.zeros((len(vocab["wg"]), 0))
        self._index: dict[Entity, tuple[int, int, int]] = {}
        return self

    # ---- prediction -----------------------------------------------------------------------------
    def _rows(self, ents: Sequence[Entity]) -> np.ndarray:
        """(n, 3) indices per level, -1 where unseen (that level contributes 0)."""
        cache = self._index
        out = []
        for e in ents:
            hit = cache.get(e)
            if hit is None:
                hit = tuple(self.vocab_[lv].get(_level_key(e, lv), -1) for lv in LEVELS)  # type: ignore[assignment]
                if len(cache) < 100_000:
                    cache[e] = hit  # type: ignore[assignment]
            out.append(hit)
        return np.array(out, dtype=np.int64).reshape(len(ents), len(LEVELS))

    def predict_log(self, X: Any, keys: PairKeys | None) -> np.ndarray:
        """log S of every row: the factor model where both workloads are known, the cold start elsewhere."""
        return self._predict_log(X, keys)[0]

    def _predict_log(self, X: Any, keys: PairKeys | None) -> tuple[np.ndarray, np.ndarray | None]:
        """``predict_log`` and ``known`` (None without keys) from one lookup of the rows' entities."""
        Xa = self._ready(X)
        if keys is None or len(keys) != Xa.shape[0]:
            return self._cold_log(Xa, None), None
        ia, ib = self._rows(keys.entities("a")), self._rows(keys.entities("b"))
        seen = (ia[:, 0] >= 0) & (ib[:, 0] >= 0)
        known = seen
        if self.cold == "prior":  # an unseen side's effects are their prior, 0: the known side and the GPU still count
            known = np.ones_like(known)
        out = np.empty(Xa.shape[0])
        if known.any():
            val = self._base(keys.gpu_mem_mib[known])
            ka, kb = ia[known], ib[known]
            for c, lv in enumerate(LEVELS):
                a, b = ka[:, c], kb[:, c]
                val = val + np.where(a >= 0, self.sens_[lv][np.maximum(a, 0)], 0.0)
                val = val + np.where(b >= 0, self.press_[lv][np.maximum(b, 0)], 0.0)
            if self.u_.shape[1]:
                a, b = ka[:, 1], kb[:, 1]
                both = (a >= 0) & (b >= 0)
                val = val + np.where(both, (self.u_[np.maximum(a, 0)] * self.v_[np.maximum(b, 0)]).sum(axis=1), 0.0)
            out[known] = val
        if (~known).any():
            out[~known] = self._cold_log(Xa[~known], keys.gpu_mem_mib[~known])
        return out, seen

    def _base(self, gpu_mem_mib: np.ndarray) -> np.ndarray:
        """mu plus the GPU's effect (0 for a GPU never seen)."""
        gk = np.rint(np.asarray(gpu_mem_mib, dtype=np.float64)).astype(np.int64)
        gi = np.array([self.gpus_.get(str(g), -1) for g in gk.tolist()], dtype=np.int64)
        return self.mu_ + np.where(gi >= 0, self.gpu_bias_[np.maximum(gi, 0)], 0.0)

    def _cold_log(self, Xa: np.ndarray, gpu_mem_mib: np.ndarray | None) -> np.ndarray:
        if self.cold == "prior":
            return self._base(gpu_mem_mib) if gpu_mem_mib is not None else np.full(Xa.shape[0], self.mu_)
        return np.log(self.cold_.predict(Xa))

    def predict_cold(self, X: Any, keys: PairKeys | None = None) -> np.ndarray:
        """Every row as a cold start (neither workload known): what the bound's cold-start scores are made of."""
        Xa = self._ready(X)
        mem = keys.gpu_mem_mib if keys is not None and len(keys) == Xa.shape[0] else None
        return self._finish(self._cold_log(Xa, mem))

    def predict(self, X: Any, keys: PairKeys | None = None) -> np.ndarray:
        return self._finish(self.predict_log(X, keys))

    def predict_known(self, X: Any, keys: PairKeys) -> tuple[np.ndarray, np.ndarray]:
        """``predict`` and ``known`` in one pass (the planner's exploration view asks both of every batch)."""
        log_s, seen = self._predict_log(X, keys)
        return self._finish(log_s), (seen if seen is not None else np.zeros(len(log_s), dtype=bool))

    def known(self, keys: PairKeys) -> np.ndarray:
        """Rows the factor model answers (both workloads seen in training); the rest are cold starts."""
        ia, ib = self._rows(keys.entities("a")), self._rows(keys.entities("b"))
        return (ia[:, 0] >= 0) & (ib[:, 0] >= 0)

    # ---- state ----------------------------------------------------------------------------------
    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        cold_meta, cold_arrays = self.cold_.state()
        meta = {
            "params": _jsonable(self.get_params()), "n_features": self.n_features_in_, "mu": self.mu_,
            "vocab": {lv: sorted(self.vocab_[lv], key=self.vocab_[lv].__getitem__) for lv in LEVELS},
            "gpus": sorted(self.gpus_, key=self.gpus_.__getitem__), "cold": cold_meta,
        }
        arrays = {f"cold_{k}": a for k, a in cold_arrays.items()}
        arrays.update({f"sens_{lv}": self.sens_[lv] for lv in LEVELS})
        arrays.update({f"press_{lv}": self.press_[lv] for lv in LEVELS})
        arrays.update({"gpu_bias": self.gpu_bias_, "u": self.u_, "v": self.v_})
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> CFRegressor:
        params = dict(meta["params"])
        if "level_l2" in params:
            params["level_l2"] = tuple(params["level_l2"])
        model = cls(**params)
        model.n_features_in_ = int(meta["n_features"])
        model.cold_ = LightGBMRegressor.from_state(meta["cold"], {k[5:]: a for k, a in arrays.items() if k.startswith("cold_")})
        model.pre_ = model.cold_.pre_
        model.mu_ = float(meta["mu"])
        model.vocab_ = {lv: {name: i for i, name in enumerate(meta["vocab"][lv])} for lv in LEVELS}
        model.gpus_ = {name: i for i, name in enumerate(meta["gpus"])}
        model.sens_ = {lv: arrays[f"sens_{lv}"] for lv in LEVELS}
        model.press_ = {lv: arrays[f"press_{lv}"] for lv in LEVELS}
        model.gpu_bias_ = arrays["gpu_bias"]
        model.u_, model.v_ = arrays["u"], arrays["v"]
        for lv in LEVELS:
            if len(model.sens_[lv]) != len(model.vocab_[lv]) or len(model.press_[lv]) != len(model.vocab_[lv]):
                raise ValueError(f"effects of level {lv!r} do not match its vocabulary")
        model._index = {}
        return model
