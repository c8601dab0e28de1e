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
* **Not running** is an option with score w_j (value 0, no rent); for a running job the planner passes
  (1 + P) w_j (the outbid margin, ``PlannerConfig.preempt_outbid``) or inf.
* **Oscillation.** Iterations are bounded, the step diminishes (eta_t = eta_0 / sqrt(t)), prices warm
  start from the last epoch, and the best aggregate-feasible selection seen is returned; the packer
  repairs whatever the aggregate view cannot realise per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from elastico_core.model.cluster import Cluster

RESOURCE_KINDS = ("sm", "mem", "slot")
NODE_GOODS = ("cpu", "host_mem")


@dataclass(frozen=True, slots=True, eq=False)
class ClusterTotals:
    """What the market needs of a cluster, per GPU model (computed once per cluster)."""

    cluster: Cluster
    model_names: tuple[str, ...]
    gpus_per_model: np.ndarray
    usable: np.ndarray  # MiB per GPU jobs may use, per model
    cpu_per_gpu: float
    host_per_gpu: float
    max_jobs_per_gpu: int

    @classmethod
    def of(cls, cluster: Cluster) -> ClusterTotals:
        models = cluster.gpu_models()
        total_gpus = float(len(cluster.gpus))
        return cls(
            cluster,
            tuple(m.name for m in models),
            np.array([sum(n.gpu_count for n in cluster.nodes if n.gpu.name == m.name) for m in models], dtype=float),
            np.array([cluster.usable_mem_mib(m) for m in models]),
            sum(n.cpu_cores for n in cluster.nodes) / total_gpus,
            sum(n.host_mem_mib for n in cluster.nodes) / total_gpus,
            cluster.max_jobs_per_gpu,
        )


@dataclass(frozen=True, slots=True, eq=False)
class ExtraGoods:
    """Goods beyond the cluster's, each option using at most two adjacent ones: a queue's quota of GPUs and of
    GPU memory on one GPU model (``pds/quotas.py``). Priced by the same tâtonnement as every other good.

    An option uses the first good by its dominant share of a GPU (the largest of its ``sm``, ``mem`` and
    ``slot`` usage, in GPUs' worth) and the second by its ``mem`` usage: the market derives both from its own
    usage grid, so they cost two array operations, not a grid of their own."""

    names: tuple[str, ...]
    capacity: np.ndarray  # (E,)
    good: np.ndarray  # (J, K) or (J, 1) int: the first of the option's two goods (0..E-2), -1: none


class OptionDemands(Protocol):
    """Each job's options padded to (J, K): which are valid, their GPU model and per-GPU demands."""

    @property
    def valid(self) -> np.ndarray: ...
    @property
    def model(self) -> np.ndarray: ...
    @property
    def mem(self) -> np.ndarray: ...
    @property
    def sm(self) -> np.ndarray: ...
    @property
    def cpu(self) -> np.ndarray: ...
    @property
    def host(self) -> np.ndarray: ...
    @property
    def dp(self) -> np.ndarray: ...


def _extra_usage(usage: np.ndarray, has: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Use of an option's two extra goods (``ExtraGoods``) from its (5, ...) usage: its dominant share of a GPU
    and its memory (``usage[1]`` itself, not a copy, where every option has them); 0 where it has none."""
    share = np.maximum(usage[0], usage[1])
    np.maximum(share, usage[2], out=share)
    mem = usage[1]
    if not has.all():
        share *= has
        mem = mem * has
    return share, mem


def _extra_priced(prices: np.ndarray, n_models: int) -> bool:
    """Does some extra good have a price? A quota that binds nowhere costs no rent, and its two grid
    operations per rent are skipped (the common case: quotas bind only where a queue wants more)."""
    return bool(prices[3 * n_models + 2 :].any())


def _extra_rent(prices: np.ndarray, good: np.ndarray, usage: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Rent of the extra goods: ``good`` holds absolute price indexes (0 where none, with zero usage)."""
    rent = prices[good] * usage[0]
    rent += prices[good + 1] * usage[1]
    return rent


def _rent(prices: np.ndarray, n_models: int, model: np.ndarray, usage: np.ndarray) -> np.ndarray:
    """Sum over goods of lambda_g x usage_g for options given as ``model`` (N,) and ``usage`` (5, N).

    The only rent formula: tâtonnement runs it on the valid options, the packer's (J, K) grid on every
    cell, so both see the same numbers to the last bit.
    """
    n = n_models
    node = prices[3 * n] * usage[3] + prices[3 * n + 1] * usage[4]
    if n == 1:
        return prices[0] * usage[0] + prices[1] * usage[1] + prices[2] * usage[2] + node
    per = prices[: 3 * n].reshape(n, 3)[model]
    return (per * usage[:3].T).sum(axis=1) + node


@dataclass(frozen=True, slots=True)
class Options:
    """The market's valid options as one flat array per field, job-contiguous (each job's options are a
    prefix of its row), so a price iteration costs O(options) rather than O(jobs x widest job)."""

    n_jobs: int
    n_models: int
    index: np.ndarray  # flat (J x K) cell of each entry
    starts: np.ndarray  # first flat position of each job with options
    lengths: np.ndarray
    jobs: np.ndarray  # the jobs with options
    col: np.ndarray  # option (column) index of each flat entry
    model: np.ndarray
    usage: np.ndarray  # (5, N): sm, mem, slot, cpu, host
    n_goods: int = 0  # every good, extra ones included (0: only the cluster's)
    extra_good: np.ndarray | None = None  # (N,) absolute price index of each option's first extra good
    extra_usage: tuple[np.ndarray, np.ndarray] | None = None  # (N,) twice: GPU share, memory

    @classmethod
    def of(cls, valid: np.ndarray, model: np.ndarray, usage: np.ndarray, n_models: int,
           extra: ExtraGoods | None = None, extra_index: np.ndarray | None = None) -> Options:
        """``extra_index``: the (J, K) or (J, 1) absolute price index of the extra goods (``Market``), when known."""
        n_jobs, width = valid.shape
        lengths_all = valid.sum(axis=1)
        jobs = np.flatnonzero(lengths_all > 0)
        idx = np.flatnonzero(valid.ravel())
        lengths = lengths_all[jobs]
        starts = np.cumsum(lengths) - lengths
        base = 3 * n_models + 2
        flat = usage.reshape(5, -1)[:, idx]
        if extra is None:
            return cls(n_jobs, n_models, idx, starts, lengths, jobs, idx % width, model.ravel()[idx], flat, base)
        # each option's extra goods from its row (one per job when the goods do not depend on the option)
        # and its use from the flat usage: nothing of the (J, K) grids is gathered
        index = extra_index if extra_index is not None else np.where(extra.good >= 0, base + extra.good, 0)
        good_at = np.repeat(index[jobs, 0], lengths) if index.shape[1] == 1 else np.broadcast_to(index, valid.shape).ravel()[idx]
        return cls(n_jobs, n_models, idx, starts, lengths, jobs, idx % width, model.ravel()[idx], flat,
                   base + len(extra.names), good_at, _extra_usage(flat, good_at > 0))

    def take(self, grid: np.ndarray) -> np.ndarray:
        """A (J, K) per-option array as this flat layout."""
        return grid.ravel()[self.index]

    def rent(self, prices: np.ndarray) -> np.ndarray:
        rent = _rent(prices, self.n_models, self.model, self.usage)
        if self.extra_good is not None and self.extra_usage is not None and _extra_priced(prices, self.n_models):
            rent += _extra_rent(prices, self.extra_good, self.extra_usage)
        return rent

    def best_response(self, score: np.ndarray, none_score: np.ndarray) -> np.ndarray:
        """Each job's arg-min score option (Eq. 7, l. 6 of Alg. 1; the first of equals), or -1 when
        not running scores lower. ``score`` is flat, one entry per valid option."""
        choice = np.full(self.n_jobs, -1, dtype=np.int64)
        if not len(self.jobs):
            return choice
        segmin = np.minimum.reduceat(score, self.starts)
        at_min = score <= np.repeat(segmin, self.lengths)
        first = np.minimum.reduceat(np.where(at_min, self.col, np.iinfo(np.int64).max), self.starts)
        choice[self.jobs] = np.where(segmin < none_score[self.jobs], first, -1)
        return choice

    def demand(self, choice: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, float]:
        """Aggregate usage U_g of a selection (option per job, -1 = none) and its total ``value`` (flat)."""
        pick = choice[self.jobs]
        sel = pick >= 0
        pos = self.starts[sel] + pick[sel]
        n = self.n_models
        out = np.zeros(max(3 * n + 2, self.n_goods))
        models = self.model[pos]
        for i in range(3):
            out[i : 3 * n : 3] = np.bincount(models, weights=self.usage[i, pos], minlength=n)
        out[3 * n] = float(self.usage[3, pos].sum())
        out[3 * n + 1] = float(self.usage[4, pos].sum())
        if self.extra_good is not None and self.extra_usage is not None:
            good = self.extra_good[pos]
            out += np.bincount(good, weights=self.extra_usage[0][pos], minlength=len(out))[: len(out)]
            out += np.bincount(good + 1, weights=self.extra_usage[1][pos], minlength=len(out))[: len(out)]
        return out, float(value[pos].sum())


@dataclass(frozen=True, slots=True)
class Market:
    """Goods, their capacities and each option's usage of them, in GPUs' worth."""

    goods: tuple[str, ...]
    capacity: np.ndarray  # (G,)
    n_models: int
    usage: np.ndarray  # (5, J, K): sm, mem, slot, cpu, host of every cell, valid or not
    model: np.ndarray  # (J, K) int
    options: Options  # the valid cells, flat
    extra: ExtraGoods | None = None  # the queues' quota goods, after the cluster's
    extra_index: np.ndarray | None = None  # (J, K) or (J, 1): absolute price index of each cell's first extra good (0: none)
    extra_has: np.ndarray | None = None  # (J, K) or (J, 1): does the cell use extra goods
    _extra_grid: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list, compare=False, repr=False)

    @property
    def extra_usage(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(J, K) twice: each cell's use of its two extra goods; computed when a rent first needs it (never
        while no quota has a price)."""
        if self.extra_has is None:
            return None
        if not self._extra_grid:
            self._extra_grid.append(_extra_usage(self.usage, self.extra_has))
        return self._extra_grid[0]

    @classmethod
    def of(cls, *, totals: ClusterTotals, demands: OptionDemands, sm_capacity: float, extra: ExtraGoods | None = None) -> Market:
        """The market of one epoch: a good per (GPU model, resource kind) and per node resource, then the
        ``extra`` goods (a queue's quota per GPU model, when the cluster has queues)."""
        goods = tuple(f"{m}:{k}" for m in totals.model_names for k in RESOURCE_KINDS) + NODE_GOODS
        n = len(totals.model_names)
        cap = np.zeros(len(goods))
        for mi in range(n):
            cap[3 * mi : 3 * mi + 3] = totals.gpus_per_model[mi]
        cap[3 * n :] = float(np.sum(totals.gpus_per_model))
        if extra is not None:
            goods += extra.names
            cap = np.concatenate([cap, extra.capacity])
        d = demands.dp.astype(np.float64)
        model = demands.model
        usage = np.empty((5, *d.shape))
        usage[0] = d * demands.sm / sm_capacity
        usage[1] = d * demands.mem / totals.usable[model]
        usage[2] = d / totals.max_jobs_per_gpu
        usage[3] = d * demands.cpu / totals.cpu_per_gpu
        usage[4] = d * demands.host / totals.host_per_gpu
        if extra is None:
            return cls(goods, cap, n, usage, model, Options.of(demands.valid, model, usage, n))
        has = extra.good >= 0
        index = np.where(has, 3 * n + 2 + extra.good, 0)
        return cls(goods, cap, n, usage, model, Options.of(demands.valid, model, usage, n, extra, index), extra, index, has)

    def good_index(self, kind: str, model: int = 0) -> int:
        if kind in NODE_GOODS:
            return 3 * self.n_models + NODE_GOODS.index(kind)
        return 3 * model + RESOURCE_KINDS.index(kind)

    def rent(self, prices: np.ndarray) -> np.ndarray:
        """Rent of every option, valid or not, as a (J, K) grid (the packer's score)."""
        shape = self.model.shape
        rent = _rent(prices, self.n_models, self.model.ravel(), self.usage.reshape(5, -1)).reshape(shape)
        if self.extra_index is not None and _extra_priced(prices, self.n_models):
            rent += _extra_rent(prices, self.extra_index, self.extra_usage)  # type: ignore[arg-type]
        return rent

    def demand(self, choice: np.ndarray) -> np.ndarray:
        """Aggregate usage U_g of a selection (chosen option per job, -1 = none)."""
        return self.options.demand(choice, np.zeros(len(self.options.index)))[0]


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
    opts = market.options
    base, worth = opts.take(base_score), opts.take(value)
    for it in range(1, cfg.max_iter + 1):
        choice = opts.best_response(base + opts.rent(prices), none_score)
        used, total = opts.demand(choice, worth)
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
            return DualResult(prices, np.full(opts.n_jobs, -1), 0, False, 0.0, np.zeros_like(cap))
        _, choice, near_prices, excess, total = closest
        return DualResult(near_prices, choice, it, False, total, excess)
    total, choice, best_prices, excess = best
    return DualResult(prices if converged else best_prices, choice, it, converged, total, excess)
