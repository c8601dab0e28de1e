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


def price_step(prices: np.ndarray, excess: np.ndarray, step: float) -> np.ndarray:
    """Eq. 8: a projected subgradient step, lambda <- max(0, lambda + eta (U - C)), normalised by C."""
    return np.maximum(0.0, prices + step * excess)


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
    last_choice = np.full(valid.shape[0], -1)
    last_excess = np.zeros_like(cap)
    converged = False
    it = 0
    rows = np.arange(valid.shape[0])
    for it in range(1, cfg.max_iter + 1):
        score = base_score + rent(market, prices)
        choice = best_response(score, valid, none_score)
        excess = (demand(market, choice) - capacity) / cap
        chosen = choice >= 0
        total = float(value[rows[chosen], choice[chosen]].sum())
        feasible = bool(np.all(excess <= cfg.tol))
        if feasible and (best is None or total > best[0] + 1e-12):
            best = (total, choice, prices.copy(), excess)
        last_choice, last_excess = choice, excess
        if feasible and np.all((prices <= 1e-12) | (excess >= -cfg.slack)):
            converged = True
            break
        prices = price_step(prices, excess, cfg.eta0 / np.sqrt(it))
    if best is None:
        chosen = last_choice >= 0
        total = float(value[rows[chosen], last_choice[chosen]].sum())
        return DualResult(prices, last_choice, it, False, total, last_excess)
    total, choice, best_prices, excess = best
    return DualResult(prices if converged else best_prices, choice, it, converged, total, excess)
