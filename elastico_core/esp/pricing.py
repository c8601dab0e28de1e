"""Scoring (Eq. 7) and tâtonnement price updates (Eq. 8), as pure vectorised functions.

Decisions on the paper's open points, made here:

* **Units.** A good is one resource of one GPU model (``<model>:sm``, ``<model>:mem``, ``<model>:slot``)
  or a node resource (``cpu``, ``host_mem``). Usage is measured in *GPUs' worth*: an option holding
  half a GPU's memory on each of 2 GPUs uses 1.0 of ``mem``; capacity is the number of GPUs. Prices are
  then score units per GPU's worth, commensurable with the normalised PerformanceCost (0..1) at any
  cluster size.
* **The slot good.** At most ``max_jobs_per_gpu`` jobs share a device, so "a place on a GPU" is a
  scarce good too (1/max_jobs per GPU); pricing it is what lets the market decide how many jobs run.
* **Weights.** Eq. 7's PerformanceCost is scaled by w_j: ``Score = w_j (1 - T/T_max) + rent + Gamma``.
  This is the negated per-job Lagrangian of Eq. 6 with the value w_j T/T_max, shifted by the constant w_j.
* **Not running** is an option with score w_j (value 0, no rent); a running job never takes it here.
* **Oscillation.** Iterations are bounded, the step diminishes (eta_t = eta_0 / sqrt(t)), prices warm
  start from the last epoch, and the best aggregate-feasible selection seen is returned; the packer
  repairs whatever the aggregate view cannot realise per GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RESOURCE_KINDS = ("sm", "mem", "slot")
NODE_GOODS = ("cpu", "host_mem")


@dataclass(frozen=True, slots=True)
class Market:
    """Goods, their (effective) capacities and each option's usage of them, in GPUs' worth."""

    goods: tuple[str, ...]
    capacity: np.ndarray  # (G,)
    n_models: int
    usage_sm: np.ndarray  # (J, K) usage of its model's sm good
    usage_mem: np.ndarray
    usage_slot: np.ndarray
    usage_cpu: np.ndarray
    usage_host: np.ndarray
    model: np.ndarray  # (J, K) int

    def good_index(self, kind: str, model: int = 0) -> int:
        if kind in NODE_GOODS:
            return 3 * self.n_models + NODE_GOODS.index(kind)
        return 3 * model + RESOURCE_KINDS.index(kind)


def make_market(
    model_names: Sequence[str],
    gpus_per_model: np.ndarray,
    usable_mem_per_model: np.ndarray,
    cpu_per_gpu: float,
    host_per_gpu: float,
    max_jobs_per_gpu: int,
    sm_capacity: float,
    model: np.ndarray,
    mem: np.ndarray,
    sm: np.ndarray,
    cpu: np.ndarray,
    host: np.ndarray,
    dp: np.ndarray,
) -> Market:
    goods = tuple(f"{m}:{k}" for m in model_names for k in RESOURCE_KINDS) + NODE_GOODS
    n = len(model_names)
    cap = np.zeros(len(goods))
    for mi in range(n):
        cap[3 * mi : 3 * mi + 3] = gpus_per_model[mi]
    total = float(np.sum(gpus_per_model))
    cap[3 * n :] = total
    d = dp.astype(np.float64)
    return Market(
        goods=goods,
        capacity=cap,
        n_models=n,
        usage_sm=d * sm / sm_capacity,
        usage_mem=d * mem / usable_mem_per_model[model],
        usage_slot=d / max_jobs_per_gpu,
        usage_cpu=d * cpu / cpu_per_gpu,
        usage_host=d * host / host_per_gpu,
        model=model,
    )


def rent(market: Market, prices: np.ndarray) -> np.ndarray:
    """Sum over goods of lambda_g x usage_g for every option, (J, K)."""
    n = market.n_models
    if n == 1:
        r = prices[0] * market.usage_sm + prices[1] * market.usage_mem + prices[2] * market.usage_slot
    else:
        per_model = prices[: 3 * n].reshape(n, 3)
        r = (
            per_model[market.model, 0] * market.usage_sm
            + per_model[market.model, 1] * market.usage_mem
            + per_model[market.model, 2] * market.usage_slot
        )
    return r + prices[3 * n] * market.usage_cpu + prices[3 * n + 1] * market.usage_host


def best_response(score: np.ndarray, valid: np.ndarray, none_score: np.ndarray) -> np.ndarray:
    """Each job's arg-min score option (Eq. 7 line 6 of Alg. 1), or -1 when not running scores lower."""
    masked = np.where(valid, score, np.inf)
    k = np.argmin(masked, axis=1)
    best = masked[np.arange(len(k)), k]
    return np.where(best < none_score, k, -1)


def demand(market: Market, choice: np.ndarray) -> np.ndarray:
    """Aggregate usage U_g of a selection (chosen option per job, -1 = none)."""
    rows = np.flatnonzero(choice >= 0)
    cols = choice[rows]
    n = market.n_models
    out = np.zeros(len(market.goods))
    models = market.model[rows, cols]
    for i, arr in enumerate((market.usage_sm, market.usage_mem, market.usage_slot)):
        out[i : 3 * n : 3] = np.bincount(models, weights=arr[rows, cols], minlength=n)
    out[3 * n] = arr_sum(market.usage_cpu, rows, cols)
    out[3 * n + 1] = arr_sum(market.usage_host, rows, cols)
    return out


def arr_sum(arr: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> float:
    return float(arr[rows, cols].sum()) if len(rows) else 0.0


def price_step(prices: np.ndarray, excess: np.ndarray, step: float, max_price: float = np.inf) -> np.ndarray:
    """Eq. 8: a projected subgradient step, lambda <- max(0, lambda + eta (U - C)), normalised by C.

    Prices are also capped: beyond ``max_price`` every job whose value could pay has been priced out
    already, and an uncapped price would only grow while a good stays short.
    """
    return np.clip(prices + step * excess, 0.0, max_price)


@dataclass(frozen=True, slots=True)
class DualResult:
    prices: np.ndarray
    choice: np.ndarray  # best aggregate-feasible selection seen
    iterations: int
    converged: bool
    objective: float  # value of ``choice``
    excess: np.ndarray  # normalised excess demand of ``choice``


@dataclass(frozen=True, slots=True)
class TatonnementConfig:
    max_iter: int = 40
    eta0: float = 0.6
    tol: float = 1e-6  # feasibility tolerance on normalised excess
    slack: float = 0.08  # a priced good may be this far below capacity and still count as converged
    max_price: float = 50.0  # score units per GPU's worth: far above any job's value (w_j <= a few)
    patience: int = 10  # stop once the best feasible selection has not improved for this many steps


def tatonnement(
    market: Market,
    capacity: np.ndarray,
    base_score: np.ndarray,
    value: np.ndarray,
    valid: np.ndarray,
    none_score: np.ndarray,
    prices0: np.ndarray,
    cfg: TatonnementConfig,
) -> DualResult:
    """Iterate best responses and price steps until the market clears (or ``max_iter``).

    ``capacity`` is C_eff of Eq. 12. Returns the best feasible selection seen (by total value);
    if none was feasible, the last one (the packer will repair it).
    """
    cap = np.maximum(capacity, 1e-9)
    prices = prices0.copy()
    best: tuple[float, np.ndarray, np.ndarray, np.ndarray] | None = None
    # when nothing clears (a reservation running jobs cannot yield to), the least-short selection, at
    # the lowest prices that reach it: warm-starting from ever higher prices would escalate each epoch
    closest: tuple[float, np.ndarray, np.ndarray, np.ndarray, float] | None = None
    converged = False
    it = best_at = closest_at = 0
    flat = _Flat.of(market, base_score, value, valid)
    for it in range(1, cfg.max_iter + 1):
        choice = flat.best_response(prices, none_score)
        used, total = flat.demand(choice)
        excess = (used - capacity) / cap
        feasible = bool(np.all(excess <= cfg.tol))
        if feasible and (best is None or total > best[0] + 1e-12):
            best = (total, choice, prices.copy(), excess)
            best_at = it
        shortage = float(np.max(excess))
        if not feasible and (closest is None or shortage < closest[0] - 1e-9):
            closest = (shortage, choice, prices.copy(), excess, total)
            closest_at = it
        if feasible and np.all((prices <= 1e-12) | (excess >= -cfg.slack)):
            converged = True
            break
        if best is not None and it - best_at >= cfg.patience:
            break
        if best is None and closest is not None and it - closest_at >= cfg.patience:
            break  # the shortage no longer shrinks: more iterations only raise prices
        prices = price_step(prices, excess, cfg.eta0 / np.sqrt(it), cfg.max_price)
    if best is None:
        if closest is None:  # no iteration ran
            return DualResult(prices, np.full(valid.shape[0], -1), 0, False, 0.0, np.zeros_like(cap))
        _, choice, near_prices, excess, total = closest
        return DualResult(near_prices, choice, it, False, total, excess)
    total, choice, best_prices, excess = best
    return DualResult(prices if converged else best_prices, choice, it, converged, total, excess)


@dataclass(frozen=True, slots=True)
class _Flat:
    """The market's valid options as one flat array per field, job-contiguous (each job's options are a
    prefix of its row), so a price iteration costs O(options) rather than O(jobs x widest job)."""

    n_jobs: int
    n_models: int
    starts: np.ndarray  # first flat position of each job with options
    lengths: np.ndarray
    jobs: np.ndarray  # the jobs with options
    col: np.ndarray  # option (column) index of each flat entry
    base: np.ndarray
    value: np.ndarray
    model: np.ndarray
    usage: np.ndarray  # (5, N): sm, mem, slot, cpu, host

    @classmethod
    def of(cls, market: Market, base: np.ndarray, value: np.ndarray, valid: np.ndarray) -> _Flat:
        n_jobs, width = valid.shape
        lengths_all = valid.sum(axis=1)
        jobs = np.flatnonzero(lengths_all > 0)
        idx = np.flatnonzero(valid.ravel())
        lengths = lengths_all[jobs]
        starts = np.cumsum(lengths) - lengths
        usage = np.stack(
            [a.ravel()[idx] for a in (market.usage_sm, market.usage_mem, market.usage_slot, market.usage_cpu, market.usage_host)]
        )
        return cls(n_jobs, market.n_models, starts, lengths, jobs, idx % width, base.ravel()[idx], value.ravel()[idx],
                   market.model.ravel()[idx], usage)

    def rent(self, prices: np.ndarray) -> np.ndarray:
        n = self.n_models
        node = prices[3 * n] * self.usage[3] + prices[3 * n + 1] * self.usage[4]
        if n == 1:
            return prices[0] * self.usage[0] + prices[1] * self.usage[1] + prices[2] * self.usage[2] + node
        per = prices[: 3 * n].reshape(n, 3)[self.model]
        return (per * self.usage[:3].T).sum(axis=1) + node

    def best_response(self, prices: np.ndarray, none_score: np.ndarray) -> np.ndarray:
        """Per job, the first option of least score (as ``best_response`` on the padded table)."""
        choice = np.full(self.n_jobs, -1, dtype=np.int64)
        if not len(self.jobs):
            return choice
        score = self.base + self.rent(prices)
        segmin = np.minimum.reduceat(score, self.starts)
        at_min = score <= np.repeat(segmin, self.lengths)
        first = np.minimum.reduceat(np.where(at_min, self.col, np.iinfo(np.int64).max), self.starts)
        choice[self.jobs] = np.where(segmin < none_score[self.jobs], first, -1)
        return choice

    def demand(self, choice: np.ndarray) -> tuple[np.ndarray, float]:
        """Aggregate usage of a selection and its total value."""
        pick = choice[self.jobs]
        sel = pick >= 0
        pos = self.starts[sel] + pick[sel]
        n = self.n_models
        out = np.zeros(3 * n + 2)
        models = self.model[pos]
        for i in range(3):
            out[i : 3 * n : 3] = np.bincount(models, weights=self.usage[i, pos], minlength=n)
        out[3 * n] = float(self.usage[3, pos].sum())
        out[3 * n + 1] = float(self.usage[4, pos].sum())
        return out, float(self.value[pos].sum())
