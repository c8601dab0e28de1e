"""Queues in planning: quotas as priced goods, what each queue may hold this epoch, and reclaim.

Each epoch (``QuotaEpoch``), for every queue and GPU model, in GPUs' worth of GPUs and of GPU memory:

1. **Usage** is what its running jobs are charged (``model.queues.charge``); **demand** is what all its
   jobs would be charged at their most valuable configurations (what each would take unhindered).
2. **Entitlement** (``entitlements``): a queue keeps min(demand, nominal); the rest of its nominal quota,
   up to its lending limit, is lent to its cohort. Queues that want more than their nominal quota share
   what is lent by weight (``fair_share``: weighted dominant-resource progressive filling over GPUs and
   GPU memory), up to their borrowing limits; what the cohorts still want then shares the capacity no
   queue names. A queue's **cap** is its nominal quota, less what it lends, plus what it borrows: the caps
   of a cohort add up to its nominal quotas and the unnamed capacity it borrowed.
3. **Prices**: each (queue, model, resource) is a good of ESP's market with the cap as its capacity, so
   tâtonnement raises a shadow price for a queue whose jobs want more than it may hold and its jobs pick
   smaller configurations (or wait): the quota is a constraint the market prices, as it prices GPUs.
4. **Hard limit**: every board of the epoch carries a ``QuotaLedger``; ``Board.try_place`` refuses a
   placement that would take a queue past its limit, so no plan holds a queue above its nominal quota
   plus its borrowing limit, nor lends beyond a lending limit. A queue above its cap (others' demand grew)
   keeps what it holds — it may not grow, and its price steers it smaller — until a lender is owed.
5. **Reclaim**: a pending job that fits within its own queue's nominal quota, left waiting while some
   queue holds more than its cap, is *owed*. For ``reclaim_epochs - 1`` epochs the market and the caps
   reshape borrowers (smaller configurations free GPU memory and whole GPUs); at the last epoch the
   borrowers of its cohort are held to their caps: those that cannot shrink enough lose jobs, the
   lowest priority and most recently submitted first, and when the owed jobs still find no GPUs, a
   borrower alone on a GPU is first re-paired beside another job (its GPU freed), then requeued. A
   requeued job is checkpointed (``QueueCode.RECLAIMED``, its reason says by which queue and why).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from types import MappingProxyType
from typing import Protocol, TypeVar

import numpy as np

from elastico_core.esp.pricing import ExtraGoods
from elastico_core.model.cluster import Cluster
from elastico_core.model.job import JobSpec, gang_size
from elastico_core.model.knobs import Knobs, cartesian
from elastico_core.model.plan import Binding, Once, Plan, QueueCode, Queued, QueueStatus, Shortfall
from elastico_core.model.planning import PlanningInput
from elastico_core.model.queues import GIB, QueueSet, charge
from elastico_core.model.state import Assignment
from elastico_core.pds.actions import diff_actions
from elastico_core.pds.board import EPS, Board, Demand, DemandColumns, Layout
from elastico_core.pds.options import EpochTable
from elastico_core.rst.estimators import estimate

RES = ("gpus", "mem")  # the two quota resources, in GPUs' worth
TOL = 1e-6


@dataclass(frozen=True, slots=True, eq=False)
class QuotaLayout:
    """The cluster's queues as arrays, in GPUs' worth (memory: MiB over one GPU's usable memory)."""

    queues: QueueSet
    models: tuple[str, ...]  # the board's model order
    usable: np.ndarray  # (M,) MiB a job may use on one GPU of each model
    nominal: np.ndarray  # (Q, M, 2)
    borrow: np.ndarray  # (Q, M, 2), inf: no limit
    lend: np.ndarray  # (Q, M, 2)
    cohort: np.ndarray  # (Q,) int, -1: none
    weight: np.ndarray  # (Q,)
    pool: np.ndarray  # (M, 2): capacity no queue's nominal quota names
    sm_capacity: float
    max_jobs: int
    whole_gpus: bool = False  # charge every job whole GPUs (a scheduler that never shares one)
    layout: Layout | None = None  # the board layout it was computed for (a cache key)
    names: tuple[str, ...] = ()  # ``goods()``, computed once
    cohorts: tuple[np.ndarray, ...] = ()  # each cohort's queues
    _start: list[LedgerStart] = field(default_factory=list, compare=False, repr=False)

    def ledger_start(self) -> LedgerStart:
        """A fresh ledger's static parts, computed once per cluster."""
        if not self._start:
            self._start.append(LedgerStart.of(self))
        return self._start[0]

    @classmethod
    def of(cls, cluster: Cluster, layout: Layout, *, whole_gpus: bool = False) -> QuotaLayout:
        queues = cluster.queues
        models = tuple(sorted(layout.model_index, key=layout.model_index.__getitem__))
        by_name = {m.name: m for m in cluster.gpu_models()}
        usable = np.array([cluster.usable_mem_mib(by_name[m]) for m in models])
        n_q, n_m = len(queues), len(models)
        nominal, borrow, lend = np.zeros((n_q, n_m, 2)), np.zeros((n_q, n_m, 2)), np.zeros((n_q, n_m, 2))
        for qi, q in enumerate(queues.queues):
            for mi, m in enumerate(models):
                per_gib = GIB / usable[mi]
                for arr, a in ((nominal, q.nominal_of(m)), (borrow, q.borrowing_of(m)), (lend, q.lending_of(m))):
                    arr[qi, mi] = (a.gpus, a.memory_gib * per_gib)
        cohorts = sorted({q.cohort for q in queues.queues if q.cohort is not None})
        cohort = np.array([cohorts.index(q.cohort) if q.cohort is not None else -1 for q in queues.queues], dtype=np.intp)
        gpus = np.bincount(np.asarray(layout.gpu_model, dtype=np.intp), minlength=len(models)).astype(float)
        pool = np.maximum(np.stack([gpus, gpus], axis=1) - nominal.sum(axis=0), 0.0)
        names = tuple(f"queue:{q.name}:{m}:{r}" for q in queues.queues for m in models for r in RES)
        members = tuple(np.flatnonzero(cohort == c) for c in range(len(cohorts)))
        return cls(queues, models, usable, nominal, borrow, lend, cohort, np.array([q.weight for q in queues.queues]), pool,
                   layout.sm_capacity, cluster.max_jobs_per_gpu, whole_gpus, layout, names, members)

    @property
    def n_queues(self) -> int:
        return len(self.queues)

    def goods(self) -> tuple[str, ...]:
        """The market's names of the quota goods: ``queue:<queue>:<model>:gpus`` and ``...:mem``."""
        return self.names

    def charges(self, table: EpochTable | _Rows) -> tuple[np.ndarray, np.ndarray]:
        """Every option's charge (``model.queues.charge``), GPUs and memory, (J, K) each."""
        if self.whole_gpus:
            dp = table.dp.astype(float)
            return dp, dp
        usable = self.usable[table.model]
        mem = table.dp * (table.mem / usable)
        sm = table.sm / self.sm_capacity if math.isfinite(self.sm_capacity) else np.zeros_like(table.sm)
        gpus = table.dp * np.maximum(np.maximum(sm, table.mem / usable), 1.0 / self.max_jobs)
        return gpus, mem

    def demand_charge(self, d: Demand) -> tuple[float, float]:
        """A board demand's charge (the same formula, for one option)."""
        if self.whole_gpus:
            return float(d.dp), float(d.dp)
        usable = float(self.usable[d.model])
        sm = d.sm / self.sm_capacity if math.isfinite(self.sm_capacity) else 0.0
        return d.dp * max(sm, d.mem / usable, 1.0 / self.max_jobs), d.dp * d.mem / usable


def fair_share(want: np.ndarray, pool: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Weighted dominant-resource progressive filling: what each of Q claimants gets of ``pool`` (G,).

    Each claimant's grant grows along its ``want`` vector (Q, G) with its dominant share (the largest
    share of any pooled resource its grant takes) rising at the rate of its weight, until it has what
    it wants or a resource it needs runs out (then it stops: quota is used by jobs that need both GPUs
    and their memory). So the dominant shares of the claimants left wanting end equal per unit of
    weight, and no resource is handed out beyond the pool. In plain Python: a handful of queues and
    resources, where numpy's per-call cost would dominate (it runs every epoch).
    """
    wants = np.maximum(want, 0.0).tolist()
    n, g = len(wants), len(pool)
    caps = pool.astype(float).tolist()
    ws = weight.tolist()
    got = [0.0] * n
    dominant = []
    for row in wants:
        d = 0.0
        for r in range(g):
            if row[r] > TOL:
                d = max(d, row[r] / caps[r] if caps[r] > TOL else math.inf)
        dominant.append(d)
    active = [math.isfinite(d) and d > 0 for d in dominant]
    left = list(caps)
    for _ in range(n + g + 1):
        live = [i for i in range(n) if active[i]]
        if not live:
            break
        rate = {i: ws[i] / dominant[i] for i in live}  # d(fraction of its want)/dt
        use = [sum(rate[i] * wants[i][r] for i in live) for r in range(g)]
        dt = min((1.0 - got[i]) / rate[i] for i in live)
        for r in range(g):
            if use[r] > TOL:
                dt = min(dt, left[r] / use[r])
        dt = max(0.0, dt)
        for i in live:
            got[i] = min(1.0, got[i] + rate[i] * dt)
            if got[i] >= 1.0 - 1e-12:
                active[i] = False
        for r in range(g):
            left[r] -= use[r] * dt
            if left[r] <= TOL * max(1.0, caps[r]):  # run out: whoever needs it stops
                for i in live:
                    if wants[i][r] > TOL:
                        active[i] = False
    return np.array(got)[:, None] * np.maximum(want, 0.0)


@dataclass(frozen=True, slots=True)
class Entitlement:
    """One epoch's quota arithmetic, (Q, M, 2) each, in GPUs' worth."""

    usage: np.ndarray
    demand: np.ndarray
    lent: np.ndarray  # of its nominal quota, granted to others
    borrowed: np.ndarray  # granted beyond its nominal quota
    cap: np.ndarray  # nominal - lent + borrowed: the most it may hold now


def entitlements(lay: QuotaLayout, usage: np.ndarray, demand: np.ndarray) -> Entitlement:
    """Caps from demand (module doc, step 2); ``usage`` is only carried along."""
    n_m = lay.nominal.shape[1]
    nominal = lay.nominal
    idle = np.minimum(lay.lend, np.maximum(nominal - demand, 0.0))  # what each queue can lend
    want = np.minimum(lay.borrow, np.maximum(demand - nominal, 0.0))  # what each wants to borrow
    # a job's memory charge never exceeds its GPU charge: no queue can use more memory than GPUs' worth
    want[..., 1] = np.minimum(want[..., 1], np.maximum(nominal[..., 0] + want[..., 0] - nominal[..., 1], 0.0))
    lent = np.zeros_like(nominal)
    borrowed = np.zeros_like(nominal)
    weight = lay.weight
    if not (want > TOL).any():  # nobody borrows: everyone keeps its nominal quota
        return Entitlement(usage, demand, np.zeros_like(nominal), np.zeros_like(nominal), nominal.copy())
    for members in lay.cohorts:
        pool = idle[members].reshape(len(members), -1).sum(axis=0)
        grant = fair_share(want[members].reshape(len(members), -1), pool, weight[members]).reshape(len(members), n_m, 2)
        borrowed[members] += grant
        total = grant.sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(pool.reshape(n_m, 2) > TOL, total / pool.reshape(n_m, 2), 0.0)
        lent[members] = idle[members] * share[None]
    members = np.flatnonzero(lay.cohort >= 0)
    if len(members) and (lay.pool > TOL).any():  # what the cohorts still want shares the unnamed capacity
        still = np.maximum(want[members] - borrowed[members], 0.0).reshape(len(members), -1)
        borrowed[members] += fair_share(still, lay.pool.reshape(-1), weight[members]).reshape(len(members), n_m, 2)
    cap = nominal - lent + borrowed
    return Entitlement(usage, demand, lent, borrowed, cap)


@dataclass(frozen=True, slots=True)
class LedgerStart:
    """The parts of a fresh ``QuotaLedger`` that depend on the cluster's queues alone (flat lists)."""

    nominal: list[float]  # (Q + 1) x M x 2, the phantom queue last
    lend: list[float]
    cohort: list[int]  # Q + 1, -1: none
    pool: list[float]  # M x 2
    lend_c: list[float]  # per cohort cell: what its queues may lend while unused
    slack: list[float]

    @classmethod
    def of(cls, lay: QuotaLayout) -> LedgerStart:
        n_q, n_m = lay.n_queues, len(lay.models)
        pad = np.zeros((1, n_m, 2))
        n_c = max(len(lay.cohorts), 1)
        lend_c = np.zeros((n_c, n_m, 2))
        for q in range(n_q):
            if lay.cohort[q] >= 0:
                lend_c[lay.cohort[q]] += np.minimum(lay.lend[q], lay.nominal[q])
        pool = lay.pool.reshape(-1).tolist()
        lc = lend_c.reshape(-1).tolist()
        return cls(np.concatenate([lay.nominal, pad]).reshape(-1).tolist(), np.concatenate([lay.lend, pad]).reshape(-1).tolist(),
                   [*lay.cohort.tolist(), -1], pool, lc, [x + pool[i % (2 * n_m)] for i, x in enumerate(lc)])


class QuotaLedger:
    """The board's quota check (``pds.board.QuotaCheck``), as Kueue admits a workload, per GPU model and
    resource: the queue's use stays within its limit (nominal + borrowing limit, its fair share, or what it
    holds while above its share), and its cohort's use beyond nominal quotas stays within what its queues
    lend (each at most its lending limit, of what it does not use) plus the capacity no queue names. So a
    lender grows into its quota only as its borrowers give it back. Kept per placement and removal.

    Jobs of queue -1 are not charged (running jobs of a queue the cluster no longer has keep running)."""

    __slots__ = ("_charges", "_queues", "cohort", "lay", "lend", "lend_c", "n_models", "nominal", "over_c", "pool",
                 "pool_use", "queue_of", "room", "slack", "used")

    def __init__(self, lay: QuotaLayout, queue_of: np.ndarray, limit: np.ndarray, queue_list: list[int] | None = None) -> None:
        n_m = len(lay.models)
        static = lay.ledger_start()
        self.lay = lay
        self.n_models = n_m
        self.queue_of = queue_of.tolist() if queue_list is None else queue_list
        self._queues = np.asarray(queue_of, dtype=np.intp)
        self.room = limit.reshape(-1).tolist()
        self.nominal, self.lend, self.cohort, self.pool = static.nominal, static.lend, static.cohort, static.pool
        self.used = [0.0] * len(self.nominal)
        self.lend_c = list(static.lend_c)
        self.over_c = [0.0] * len(self.lend_c)
        self.pool_use = [0.0] * len(self.pool)
        # per cohort cell, how much more its queues may use beyond nominal quotas: a placement no larger
        # passes the cohort check without computing it (its use beyond nominal grows at most by its charge)
        self.slack = list(static.slack)
        self._charges: dict[int, tuple[Demand, float, float]] = {}  # by Demand (options share them): charge

    def _cell(self, job: int, d: Demand) -> int:
        q = self.queue_of[job] if job < len(self.queue_of) else -1
        return -1 if q < 0 else 2 * (q * self.n_models + d.model)

    def _shift(self, i: int, amount: float, cohort: list[int], over_c: list[float], lend_c: list[float],
               used: list[float]) -> tuple[int, float, float, float]:
        """What ``amount`` more (or less) of cell ``i`` does to its cohort: (cohort cell, new over, new lend,
        change of the unnamed capacity in use); cohort cell -1 when its queue has no cohort."""
        q = i // (2 * self.n_models)
        c = int(cohort[q])
        if c < 0:
            return -1, 0.0, 0.0, 0.0
        ci = 2 * c * self.n_models + i % (2 * self.n_models)
        n, cap = self.nominal[i], self.lend[i]
        u, u2 = used[i], used[i] + amount
        oc = over_c[ci] + max(0.0, u2 - n) - max(0.0, u - n)
        lc = lend_c[ci] + min(cap, max(0.0, n - u2)) - min(cap, max(0.0, n - u))
        return ci, oc, lc, max(0.0, oc - lc) - max(0.0, over_c[ci] - lend_c[ci])

    def _charge(self, d: Demand) -> tuple[float, float]:
        hit = self._charges.get(id(d))
        if hit is None or hit[0] is not d:
            g, m = self.lay.demand_charge(d)
            self._charges[id(d)] = (d, g, m)
            return g, m
        return hit[1], hit[2]

    def _fits(self, i: int, amount: float) -> bool:
        if self.room[i] < amount - EPS:
            return False
        c = int(self.cohort[i // (2 * self.n_models)])
        if c < 0 or self.slack[2 * c * self.n_models + i % (2 * self.n_models)] >= amount + EPS:
            return True
        ci, _, _, grow = self._shift(i, amount, self.cohort, self.over_c, self.lend_c, self.used)
        if ci < 0 or grow <= EPS:
            return True
        pi = ci % (2 * self.n_models)
        return self.pool_use[pi] + grow <= self.pool[pi] + EPS

    def _apply(self, i: int, amount: float) -> None:
        ci, oc, lc, grow = self._shift(i, amount, self.cohort, self.over_c, self.lend_c, self.used)
        self.used[i] += amount
        self.room[i] -= amount
        if ci >= 0:
            self.over_c[ci], self.lend_c[ci] = oc, lc
            pi = ci % (2 * self.n_models)
            self.pool_use[pi] += grow
            self._reslack(pi)

    def _reslack(self, pi: int) -> None:
        """The slack of every cohort cell of model-resource ``pi`` (they share the unnamed capacity)."""
        left = self.pool[pi] - self.pool_use[pi]
        step = 2 * self.n_models
        for ci in range(pi, len(self.slack), step):
            self.slack[ci] = max(0.0, self.lend_c[ci] - self.over_c[ci]) + left

    def admits(self, job: int, d: Demand) -> bool:
        i = self._cell(job, d)
        if i < 0:
            return True
        g, m = self._charge(d)
        return self._fits(i, g) and self._fits(i + 1, m)

    def take(self, job: int, d: Demand) -> None:
        i = self._cell(job, d)
        if i >= 0:
            g, m = self._charge(d)
            self._apply(i, g)
            self._apply(i + 1, m)

    def give(self, job: int, d: Demand) -> None:
        i = self._cell(job, d)
        if i >= 0:
            g, m = self._charge(d)
            self._apply(i, -g)
            self._apply(i + 1, -m)

    def take_all(self, jobs: Sequence[int], columns: DemandColumns) -> bool:
        """Charge many placements at once (the sticky running jobs of a round), each queue and cohort checked on
        the totals; nothing changes unless they all fit. Charges are summed per cell in numpy."""
        idx = np.asarray(jobs, dtype=np.intp)
        n = len(self._queues)
        q = np.where(idx < n, self._queues[np.minimum(idx, n - 1)], -1) if len(idx) and n else np.full(len(idx), -1)
        keep = q >= 0
        if not keep.any():
            return True
        lay = self.lay
        model, dp = columns.model[keep], columns.dp[keep].astype(float)
        if lay.whole_gpus:
            g, m = dp, dp
        else:
            usable = lay.usable[model]
            sm = columns.sm[keep] / lay.sm_capacity if math.isfinite(lay.sm_capacity) else np.zeros(len(dp))
            mem = columns.mem[keep] / usable
            g, m = dp * np.maximum(np.maximum(sm, mem), 1.0 / lay.max_jobs), dp * mem
        cell = 2 * (q[keep] * self.n_models + model)
        size = len(self.room)
        need = np.bincount(cell, weights=g, minlength=size) + np.bincount(cell + 1, weights=m, minlength=size)
        touched = np.flatnonzero(need).tolist()
        amounts = need[touched].tolist()
        room = self.room
        if any(room[i] < a - EPS for i, a in zip(touched, amounts, strict=True)):
            return False
        used, over_c, lend_c, pool_use = list(self.used), list(self.over_c), list(self.lend_c), list(self.pool_use)
        for i, a in zip(touched, amounts, strict=True):
            ci, oc, lc, grow = self._shift(i, a, self.cohort, over_c, lend_c, used)
            used[i] += a
            if ci >= 0:
                over_c[ci], lend_c[ci] = oc, lc
                pool_use[ci % (2 * self.n_models)] += grow
        if not all(u <= max(p, b) + EPS for u, p, b in zip(pool_use, self.pool, self.pool_use, strict=True)):
            return False
        for i, a in zip(touched, amounts, strict=True):
            room[i] -= a
        self.used, self.over_c, self.lend_c, self.pool_use = used, over_c, lend_c, pool_use
        for pi in range(min(len(self.pool), 2 * self.n_models)):
            self._reslack(pi)
        return True


@dataclass(frozen=True, slots=True)
class Reclaim:
    """What the last epoch of a reclaim does before planning: jobs set free of their GPUs and why."""

    freed: Mapping[str, str]  # job id -> reason (checkpointed and requeued unless re-placed)
    moved: Mapping[str, tuple[str, ...]]  # job id -> the GPUs it is re-paired onto
    deadline: frozenset[int]  # queues held to their caps this epoch
    # owed job id -> (its least configuration, the GPUs made free for it): planned as if it ran there, so
    # nothing else takes them this epoch (the planner may still reshape it; it is admitted, not kept)
    admitted: Mapping[str, tuple[Knobs, tuple[str, ...]]] = field(default_factory=lambda: MappingProxyType({}))


NO_RECLAIM = Reclaim(MappingProxyType({}), MappingProxyType({}), frozenset())


@dataclass(slots=True, eq=False)
class QuotaEpoch:
    """The quotas of one epoch over its table (module doc). Built by ``QuotaEpoch.of``.

    Charges are computed for the cells asked (``charges_at``, ``least_of``), never for the whole (J, K)
    table: on 4,096 GPUs that would cost more than the rest of the quotas' epoch; ESP's market derives the
    charge of every option from its own usage grid (``esp.pricing.ExtraGoods``).
    """

    lay: QuotaLayout
    table: EpochTable
    queue_of: np.ndarray  # (J,) queue of each row; -1 not charged; Q: a queue the cluster lacks
    unknown: dict[int, str]  # row -> the queue name it asked for that is not a queue here
    ent: Entitlement
    limit: np.ndarray  # (Q + 1, M, 2): what the board allows
    owed_before: Mapping[str, int]
    reclaim: Reclaim = NO_RECLAIM
    over: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # (Q,) holding above its cap
    _least: dict[int, int] = field(default_factory=dict)  # row -> its option of least charge, as asked
    _queue_list: list[int] | None = None  # ``queue_of`` as a list, for each round's ledger

    @classmethod
    def of(cls, lay: QuotaLayout, table: EpochTable, queues: Sequence[str], owed: Mapping[str, int],
           ent: Entitlement | None = None, reclaim: Reclaim = NO_RECLAIM, base_usage: np.ndarray | None = None) -> QuotaEpoch:
        """``queues``: each row's queue name. ``ent`` given: the entitlement computed before a reclaim
        changed the table (caps do not move because borrowers were set free); ``base_usage`` the usage it
        was computed at (what queues not held to their caps may keep)."""
        n_q = lay.n_queues
        get = lay.queues.lookup.get
        queue_of = np.array([get(q, -1) for q in queues], dtype=np.intp)
        unknown: dict[int, str] = {}
        if (queue_of < 0).any():  # running: not charged (keeps running); pending: the phantom queue Q, no room
            rows = np.flatnonzero(queue_of < 0)
            unknown = {j: queues[j] for j in rows.tolist()}
            queue_of[rows] = np.where(table.running[rows], -1, n_q)
        qe = cls(lay, table, queue_of, unknown, NO_ENTITLEMENT, np.zeros(0), owed, reclaim)
        usage = qe.sum_at(table.current, table.running)
        if ent is None:  # running jobs as they run, each pending job at its most valuable configuration
            pending = np.flatnonzero(~table.running)
            best = np.full(len(table.job_ids), -1, dtype=np.intp)
            if len(pending):
                best[pending] = np.argmax(np.where(table.valid[pending], table.value[pending], -np.inf), axis=1)
            ent = entitlements(lay, usage, usage + qe.sum_at(best, best >= 0))
        held = usage if base_usage is None else base_usage
        over = np.asarray((held > ent.cap + TOL).reshape(n_q, -1).any(axis=1), dtype=bool)
        limit = np.zeros((n_q + 1, len(lay.models), 2))
        # below its fair share a queue may grow to it (a lender: to its nominal quota, as its cohort gives
        # it back, which the ledger checks); above, it keeps what it holds until it is held to its share
        # at a reclaim's deadline; never more than nominal + borrowing limit
        keep = np.where(over[:, None, None], held, np.maximum(ent.cap, lay.nominal))
        for q in reclaim.deadline:
            keep[q] = ent.cap[q]
        limit[:n_q] = np.minimum(keep, lay.nominal + lay.borrow)
        qe.ent, qe.limit, qe.over = ent, limit, over
        return qe

    def charges_at(self, rows: np.ndarray, options: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The charge (GPUs, memory) of option ``options[i]`` of row ``rows[i]`` (``model.queues.charge``)."""
        t, lay = self.table, self.lay
        if lay.whole_gpus:
            dp = t.dp[rows, options].astype(float)
            return dp, dp
        usable = lay.usable[t.model[rows, options]]
        dp = t.dp[rows, options]
        mem = t.mem[rows, options] / usable
        sm = t.sm[rows, options] / lay.sm_capacity if math.isfinite(lay.sm_capacity) else np.zeros(len(mem))
        return dp * np.maximum(np.maximum(sm, mem), 1.0 / lay.max_jobs), dp * mem

    def least_of(self, rows: Sequence[int]) -> np.ndarray:
        """Each row's option of least charge (GPUs, then memory), kept once asked."""
        todo = [j for j in rows if j not in self._least]
        if todo:
            r = np.asarray(todo, dtype=np.intp)
            gpus, mem = self.lay.charges(_rows_of(self.table, r))
            masked = np.where(self.table.valid[r], gpus + 1e-3 * mem, np.inf)
            for j, k in zip(todo, np.argmin(masked, axis=1).tolist(), strict=True):
                self._least[j] = k
        return np.array([self._least[j] for j in rows], dtype=np.intp)

    def least_charge(self, j: int) -> tuple[int, int, float, float]:
        """Row j's least option, its GPU model, and its charge (GPUs, memory)."""
        k = int(self.least_of([j])[0])
        g, m = self.charges_at(np.array([j]), np.array([k]))
        return k, int(self.table.model[j, k]), float(g[0]), float(m[0])

    def sum_at(self, option: np.ndarray, rows_mask: np.ndarray) -> np.ndarray:
        """(Q, M, 2): the charges of ``option[j]`` summed per queue over the rows of ``rows_mask``."""
        lay, t = self.lay, self.table
        n_q, n_m = lay.n_queues, len(lay.models)
        out = np.zeros((n_q, n_m, 2))
        q = self.queue_of
        rows = np.flatnonzero(rows_mask & (q >= 0) & (q < n_q) & (option >= 0))
        if len(rows):
            k = option[rows]
            g, m = self.charges_at(rows, k)
            cell = q[rows] * n_m + t.model[rows, k]
            out[..., 0] = np.bincount(cell, weights=g, minlength=n_q * n_m).reshape(n_q, n_m)
            out[..., 1] = np.bincount(cell, weights=m, minlength=n_q * n_m).reshape(n_q, n_m)
        return out

    # ---- what the market and the boards get --------------------------------------------------------
    def goods(self) -> ExtraGoods:
        """The quota goods of ESP's market: capacity the cap, never below what a queue above its cap still
        runs at the smallest (running jobs cannot be priced out; a capacity under that would never clear)."""
        lay, t = self.lay, self.table
        n_q, n_m = lay.n_queues, len(lay.models)
        capacity = np.minimum(self.ent.cap, lay.nominal + lay.borrow)
        if self.over.any():
            rows = np.flatnonzero(t.running & np.isin(self.queue_of, np.flatnonzero(self.over)))
            least = np.full(len(t.job_ids), -1, dtype=np.intp)
            least[rows] = self.least_of(rows.tolist())
            capacity = np.maximum(capacity, self.sum_at(least, least >= 0))
        q = self.queue_of
        charged = (q >= 0) & (q < n_q)
        if n_m == 1:
            good = np.where(charged, (2 * n_m) * q, -1)[:, None]
        else:
            good = np.where(charged[:, None], (2 * n_m) * np.where(charged, q, 0)[:, None] + 2 * t.model, -1)
        return ExtraGoods(lay.goods(), capacity.reshape(-1), good.astype(np.intp, copy=False))

    def ledger(self) -> QuotaLedger:
        if self._queue_list is None:
            self._queue_list = self.queue_of.tolist()
        return QuotaLedger(self.lay, self.queue_of, self.limit, list(self._queue_list))

    # ---- after planning ------------------------------------------------------------------------------
    def held_by_queue(self, board: Board) -> np.ndarray:
        """(Q, M, 2): what each queue's placed jobs are charged on ``board``."""
        js, ks = board.option_arrays()
        placed = np.zeros(len(self.table.job_ids), dtype=bool)
        option = np.full(len(self.table.job_ids), -1, dtype=np.intp)
        placed[js] = True
        option[js] = ks
        return self.sum_at(option, placed)


NO_ENTITLEMENT = Entitlement(*(np.zeros(0),) * 5)


@dataclass(frozen=True, slots=True)
class _Rows:
    """The columns ``QuotaLayout.charges`` reads, for some rows of a table."""

    mem: np.ndarray
    sm: np.ndarray
    dp: np.ndarray
    model: np.ndarray


def _rows_of(t: EpochTable, rows: np.ndarray) -> _Rows:
    return _Rows(t.mem[rows], t.sm[rows], t.dp[rows], t.model[rows])


# ---- reclaim: who must make room at the last epoch ----------------------------------------------------
def victim_order(ids: Sequence[str], priority: Sequence[int], submit: Sequence[float], rows: Sequence[int]) -> list[int]:
    """Kueue's order of preemption candidates: lowest priority first, then the most recently submitted."""
    return sorted(rows, key=lambda j: (priority[j], -submit[j], ids[j]))


def plan_reclaim(
    qe: QuotaEpoch, layout: Layout, owed: Sequence[int], current_gpus: Mapping[int, tuple[int, ...]],
    priority: Sequence[int], submit: Sequence[float],
) -> Reclaim:
    """At the last epoch of a reclaim (module doc, step 5): which borrowers to set free or re-pair.

    ``owed``: the rows owed at their deadline, in queue order. First the quota: every queue of their
    cohorts above its cap loses jobs until its remaining jobs' least charges fit the cap (reshaping does
    the rest). Then the GPUs: on a trial board of everything still running, each owed job at its least
    charge must find GPUs; while it does not, the next candidate of a queue holding more than its nominal
    quota (above its cap first) is re-paired beside another job when it runs alone on one GPU (then anyone
    alone on a GPU: re-pairing changes no quota), else set free. Charges do not tile GPUs exactly (a job
    charged 0.75 of a GPU may leave a remainder no job fits), so a borrower within its share may still hold
    what the owed job needs. Interference of a re-paired job is checked by the epoch's IAC rounds. The
    owed job is then planned as if it ran on the GPUs found (``Reclaim.admitted``).
    """
    lay, t, ent = qe.lay, qe.table, qe.ent
    n_q = lay.n_queues
    ids = t.job_ids
    owed_q = {int(qe.queue_of[o]) for o in owed}
    cohorts = {int(lay.cohort[q]) for q in owed_q if lay.cohort[q] >= 0}
    over = [q for q in range(n_q) if qe.over[q]]
    # held to their caps: the borrowers of the owed queues' cohorts (all queues above their caps when an
    # owed queue has no cohort: they hold the capacity no queue names, which is everyone's)
    deadline = frozenset(q for q in over if not cohorts or int(lay.cohort[q]) in cohorts or lay.cohort[q] < 0)
    above = np.asarray((ent.usage > lay.nominal + TOL).reshape(n_q, -1).any(axis=1), dtype=bool)  # borrowing now
    by_queue: dict[int, list[int]] = {}
    for j in np.flatnonzero(t.running).tolist():
        q = int(qe.queue_of[j])
        if 0 <= q < n_q and above[q]:
            by_queue.setdefault(q, []).append(j)
    first = owed[0]
    by = lay.queues.queues[int(qe.queue_of[first])].name
    freed: dict[int, str] = {}
    for q in sorted(deadline):
        rows = victim_order(ids, priority, submit, by_queue.get(q, []))
        need = np.zeros((len(lay.models), 2))
        charge = {x: qe.least_charge(x) for x in rows}
        for x in rows:
            _, m, g, mm = charge[x]
            need[m] += (g, mm)
        for j in rows:
            if (need <= ent.cap[q] + TOL).all():
                break
            _, m, g, mm = charge[j]
            need[m] -= (g, mm)
            freed[j] = _why(lay, qe, q, by, ids[first], "quota")
    board = Board(layout)  # what still runs, where it runs
    keep = [j for j in current_gpus if j not in freed]
    cur = t.current
    board.place_many([(j, int(cur[j]), t.sets[j].demands[int(cur[j])], current_gpus[j]) for j in keep])
    # every queue holding more than its nominal quota may lose jobs for GPUs: those above their fair share first
    borrowers = [j for q in (*over, *(q for q in range(n_q) if above[q] and not qe.over[q]))
                 for j in victim_order(ids, priority, submit, by_queue.get(q, [])) if j not in freed]
    others = victim_order(ids, priority, submit, [j for j in keep if j not in set(borrowers)])
    movable = [*borrowers, *others]  # re-pairing changes no quota: borrowers first, then anyone alone on a GPU
    moved: dict[int, tuple[int, ...]] = {}
    admitted: dict[int, tuple[int, ...]] = {}
    least = dict(zip(owed, qe.least_of(list(owed)).tolist(), strict=True))
    for o in owed:
        d = t.sets[o].demands[least[o]]
        while board.find_gang(d) is None:
            if _repair_one(board, movable, moved):
                continue
            while borrowers and borrowers[0] not in board.where:
                borrowers.pop(0)
            if not borrowers:
                break
            c = borrowers.pop(0)
            board.remove(c)
            moved.pop(c, None)
            freed[c] = _why(lay, qe, int(qe.queue_of[c]), by, ids[first], "gpus")
        gang = board.find_gang(d)
        if gang is not None:
            board.place(o, least[o], d, gang)
            admitted[o] = gang
    return Reclaim(
        MappingProxyType({ids[j]: why for j, why in freed.items()}),
        MappingProxyType({ids[j]: tuple(layout.gpu_ids[g] for g in gs) for j, gs in moved.items() if j not in freed}),
        deadline,
        MappingProxyType({ids[o]: (t.sets[o].knobs[least[o]], tuple(layout.gpu_ids[g] for g in gs)) for o, gs in admitted.items()}),
    )


def _repair_one(board: Board, movable: list[int], moved: dict[int, tuple[int, ...]]) -> bool:
    """Move the first job of ``movable`` that runs alone on one GPU beside another job, freeing its GPU."""
    for i, c in enumerate(movable):
        entry = board.where.get(c)
        if entry is None or len(entry[2]) != 1 or len(board.occ[entry[2][0]]) != 1:
            continue
        k, dc, gpus = entry
        with board.tentative() as tx:
            tx.remove(c)
            h = board.find_single(dc)
            if h is not None and h != gpus[0] and board.occ[h] and tx.place(c, k, dc, (h,)).ok:
                tx.commit()
                moved[c] = (h,)
                del movable[i]
                return True
    return False


def _why(lay: QuotaLayout, qe: QuotaEpoch, q: int, by: str, job: str, what: str) -> str:
    name = lay.queues.queues[q].name
    held = float(qe.ent.usage[q, :, 0].sum())
    cap = float(qe.ent.cap[q, :, 0].sum())
    nominal = float(lay.nominal[q, :, 0].sum())
    lack = "GPUs for it" if what == "gpus" else "the quota it lent"
    return (f"reclaimed by queue {by} for job {job} (owed its nominal quota for {lay.queues.reclaim_epochs} epochs): "
            f"{name} held {held:.1f} GPUs of nominal {nominal:g}, entitled to {cap:.1f} now; {by} needed {lack} back; "
            "checkpointed and requeued")


# ---- the user's words: reasons in Kueue's precision ------------------------------------------------------
def quota_reason(lay: QuotaLayout, q: int, model: int, need: tuple[float, float], held: np.ndarray, limit: np.ndarray,
                 ent: Entitlement) -> tuple[str, Shortfall]:
    """Why a job of queue ``q`` does not fit its queue's quota on ``model``, in Kueue's precision: what it
    needs, what is free of the nominal quota, and which limit binds (no cohort, the borrowing limit, or
    what the cohort lends it now)."""
    spec = lay.queues.queues[q]
    m = lay.models[model]
    short = [need[r] - (limit[q, model, r] - held[q, model, r]) for r in (0, 1)]
    r = 0 if short[0] >= short[1] else 1
    scale = 1.0 if r == 0 else lay.usable[model] / GIB
    what = "GPUs" if r == 0 else "GiB of GPU memory"
    nominal = lay.nominal[q, model, r]
    free_nominal = max(0.0, nominal - held[q, model, r])
    room = max(0.0, limit[q, model, r] - held[q, model, r])
    head = f"queue {spec.name}: needs {need[r] * scale:.1f} {what} of {m}, has {free_nominal * scale:.1f} free of nominal {nominal * scale:g}"
    borrow_limit = lay.borrow[q, model, r]
    if spec.cohort is None:
        tail = "; it has no cohort to borrow from"
    elif held[q, model, r] + need[r] > nominal + borrow_limit + TOL:
        tail = f"; borrowing limit {borrow_limit * scale:g} reached"
    elif ent.lent[q, model, r] > TOL and held[q, model, r] + need[r] <= nominal + TOL:
        tail = f"; {ent.lent[q, model, r] * scale:.1f} of its quota is lent while it had no work for it"
    elif ent.borrowed[q, model, r] <= TOL:
        tail = f"; cohort {spec.cohort} has no unused quota to lend it now"
    else:
        above = max(0.0, room - free_nominal)
        tail = (f" and {above * scale:.1f} of the {ent.borrowed[q, model, r] * scale:.1f} it may borrow now; cohort "
                f"{spec.cohort} lends no more (the rest of its quota is in use or kept by lending limits)")
    binding = Binding.QUOTA if r == 0 else Binding.QUOTA_MEMORY
    return head + tail, Shortfall(binding, float(need[r] * scale), float(room * scale), f"queue {spec.name}")


def unknown_reason(name: str, queues: QueueSet) -> tuple[str, Shortfall]:
    text = f"queue {name!r} is not a queue of this cluster (queues: {', '.join(queues.names)})"
    return text, Shortfall(Binding.QUOTA, 0.0, 0.0, f"queue {name}")


def statuses(qe: QuotaEpoch, held: np.ndarray, pending: np.ndarray, prices: Mapping[str, float]) -> tuple[QueueStatus, ...]:
    """Every queue as ``queues list`` shows it (GPUs summed over models; memory in GiB)."""
    lay, ent = qe.lay, qe.ent
    gib = lay.usable / GIB
    nominal = lay.nominal
    cols = {
        "nominal_gpus": nominal[..., 0].sum(axis=1), "nominal_gib": (nominal[..., 1] * gib).sum(axis=1),
        "used_gpus": held[..., 0].sum(axis=1), "used_gib": (held[..., 1] * gib).sum(axis=1),
        "borrowed_gpus": np.maximum(held - nominal, 0.0)[..., 0].sum(axis=1), "lent_gpus": _lent(lay, held)[..., 0].sum(axis=1),
        "demand_gpus": ent.demand[..., 0].sum(axis=1), "fair_share_gpus": ent.cap[..., 0].sum(axis=1),
        "borrowing_limit_gpus": lay.borrow[..., 0].sum(axis=1), "lending_limit_gpus": lay.lend[..., 0].sum(axis=1),
    }
    rows = {k: v.tolist() for k, v in cols.items()}
    names = lay.goods()
    price = np.array([prices.get(g, 0.0) for g in names]).reshape(lay.n_queues, -1).sum(axis=1).tolist()
    return tuple(
        QueueStatus(name=q.name, cohort=q.cohort, weight=q.weight, pending=int(pending[i]), price=price[i],
                    **{k: v[i] for k, v in rows.items()})
        for i, q in enumerate(lay.queues.queues)
    )


def _lent(lay: QuotaLayout, held: np.ndarray) -> np.ndarray:
    """Of each queue's nominal quota, how much others hold now: the cohort's use beyond nominal quotas,
    drawn from its lenders' unused quota in proportion (the unnamed capacity first)."""
    lent = np.zeros_like(held)
    over = np.maximum(held - lay.nominal, 0.0)
    idle = np.minimum(lay.lend, np.maximum(lay.nominal - held, 0.0))
    for c in np.unique(lay.cohort[lay.cohort >= 0]).tolist():
        members = lay.cohort == c
        used = over[members].sum(axis=0)
        pool = idle[members].sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(pool > TOL, np.minimum(1.0, used / np.where(pool > TOL, pool, 1.0)), 0.0)
        lent[members] = idle[members] * share[None]
    return lent


def relabel(queued: Sequence[Queued], reasons: Mapping[str, tuple[QueueCode, str, Shortfall | None]]) -> tuple[Queued, ...]:
    """The plan's queue with the quota's codes and reasons where the quota is why a job waits."""
    out = []
    for q in queued:
        hit = reasons.get(q.job_id)
        out.append(q if hit is None else Queued(q.job_id, hit[0], hit[1], hit[2]))
    return tuple(out)


# ---- the planner's two calls ----------------------------------------------------------------------------
class PreparedLike(Protocol):
    """What the planner's ``Prepared`` holds that the quotas read."""

    @property
    def table(self) -> EpochTable: ...
    @property
    def specs(self) -> tuple[JobSpec, ...]: ...
    @property
    def current_gpus(self) -> dict[int, tuple[int, ...]]: ...


P = TypeVar("P", bound=PreparedLike)


def begin(inp: PlanningInput, prep: P, layout: Layout, prepare: Callable[[PlanningInput], P],
          known: QuotaLayout | None = None) -> tuple[QuotaEpoch, P]:
    """The epoch's quotas over ``prep``; at the last epoch of a reclaim, the table again with the jobs it
    set free pending and the jobs it re-paired on their new GPUs (``Reclaim``). ``known``: the cluster's
    ``QuotaLayout`` from an earlier epoch (reused when it is of this very layout)."""
    lay = known if known is not None and known.layout is layout else QuotaLayout.of(inp.cluster, layout)
    qe = QuotaEpoch.of(lay, prep.table, [s.queue for s in prep.specs], inp.owed)
    last = lay.queues.reclaim_epochs - 1  # epochs owed before this one, at the deadline
    if (last > 0 and not any(n >= last for n in inp.owed.values())) or not _borrowing(lay, qe.ent.usage):
        return qe, prep
    due = [j for j in _owed_rows(qe, qe.ent.usage) if inp.owed.get(prep.table.job_ids[j], 0) >= last]
    if not due:
        return qe, prep
    specs = prep.specs
    rc = plan_reclaim(qe, layout, due, prep.current_gpus, [s.priority for s in specs], [s.submit_time_s for s in specs])
    if rc.freed or rc.moved or rc.admitted:
        running = {jid: a for jid, a in inp.running.items() if jid not in rc.freed}
        for jid, gpus in rc.moved.items():
            running[jid] = Assignment(jid, running[jid].knobs, gpus)
        for jid, (knobs, gpus) in rc.admitted.items():
            running[jid] = Assignment(jid, knobs, gpus)
        prep = prepare(replace(inp, running=MappingProxyType(running)))
    qe = QuotaEpoch.of(lay, prep.table, [s.queue for s in prep.specs], inp.owed, ent=qe.ent, reclaim=rc, base_usage=qe.ent.usage)
    return qe, prep


def _owed_rows(qe: QuotaEpoch, held: np.ndarray, among: set[str] | None = None, placed: set[int] | None = None) -> list[int]:
    """Pending rows (in queue order) that fit their queue's nominal quota beside what it holds and the rows
    before them: the jobs a queue is owed while others hold more than they may."""
    t, lay = qe.table, qe.lay
    n_q = lay.n_queues
    reserved = np.zeros_like(held)
    out = []
    for j in np.flatnonzero(~t.running).tolist():
        q = int(qe.queue_of[j])
        if not 0 <= q < n_q or (placed is not None and j in placed) or (among is not None and t.job_ids[j] not in among):
            continue
        _, m, g, mm = qe.least_charge(j)
        c = np.array([g, mm])
        if (held[q, m] + reserved[q, m] + c <= lay.nominal[q, m] + TOL).all():
            reserved[q, m] += c
            out.append(j)
    return out


def _borrowing(lay: QuotaLayout, held: np.ndarray) -> bool:
    """Does some queue hold more than its nominal quota (capacity a reclaim could give back)?"""
    return bool((held > lay.nominal + TOL).any())


def finish(qe: QuotaEpoch, board: Board, plan: Plan, inp: PlanningInput) -> Plan:
    """The plan with the quota's word on every queued job, the jobs owed quota, and every queue's state."""
    lay, t, ent = qe.lay, qe.table, qe.ent
    n_q = lay.n_queues
    ids = t.job_ids
    placed = set(board.where)
    prices = plan.prices.as_dict()
    if len(placed) == len(ids) and not qe.reclaim.freed:  # every job placed: no one waits for quota
        nobody = np.zeros(n_q, dtype=np.intp)
        return replace(plan, owed=MappingProxyType({}), derive_queues=partial(_states, qe, board, nobody, prices))
    held = qe.held_by_queue(board)
    owed_rows = set(_owed_rows(qe, held, placed=placed)) if _borrowing(lay, held) else set()
    limit = qe.limit
    reasons: dict[str, tuple[QueueCode, str, Shortfall | None]] = {}
    owed: dict[str, int] = {}
    pending = np.zeros(n_q, dtype=np.intp)
    borrowers = [lay.queues.queues[q].name for q in range(n_q) if (held[q] > lay.nominal[q] + TOL).any()]
    left = np.ones(len(ids), dtype=bool)
    left[list(placed)] = False
    for j in np.flatnonzero(left).tolist():
        jid = ids[j]
        q = int(qe.queue_of[j])
        if jid in qe.reclaim.freed:
            reasons[jid] = (QueueCode.RECLAIMED, qe.reclaim.freed[jid], None)
            continue
        if j in qe.unknown and not t.running[j]:
            text, short = unknown_reason(qe.unknown[j], lay.queues)
            reasons[jid] = (QueueCode.QUOTA, text, short)
            continue
        if not 0 <= q < n_q:
            continue
        pending[q] += 1
        _, m, g, mm = qe.least_charge(j)
        need = (g, mm)
        if t.running[j]:
            if q in qe.reclaim.deadline:
                reasons[jid] = (QueueCode.RECLAIMED, _why(lay, qe, q, "its owners", "waiting for quota", "quota"), None)
            continue
        if j in owed_rows:
            n = int(inp.owed.get(jid, 0)) + 1
            owed[jid] = n
            name = lay.queues.queues[q].name
            text = (f"queue {name}: needs {need[0]:.1f} GPUs of {lay.models[m]}, within its nominal quota "
                    f"{lay.nominal[q, m, 0]:g} (holds {held[q, m, 0]:.1f}), which is lent to {', '.join(borrowers) or 'others'}; "
                    f"reclaiming it, epoch {min(n, lay.queues.reclaim_epochs)} of {lay.queues.reclaim_epochs}")
            reasons[jid] = (QueueCode.QUOTA, text, Shortfall(Binding.QUOTA, need[0], 0.0, f"queue {name}"))
            continue
        if (held[q, m] + np.array(need) > limit[q, m] + TOL).any():
            text, short = quota_reason(lay, q, m, need, held, limit, ent)
            reasons[jid] = (QueueCode.QUOTA, text, short)
    queue = Once(lambda: relabel(plan.queued, reasons))  # the reasons, like the plan's, derived on first read
    return replace(plan, derive_queue=queue, derive_actions=lambda: diff_actions(inp, plan.placements, queue()),
                   owed=MappingProxyType(owed), derive_queues=partial(statuses, qe, held, pending, prices))


def _states(qe: QuotaEpoch, board: Board, pending: np.ndarray, prices: Mapping[str, float]) -> tuple[QueueStatus, ...]:
    return statuses(qe, qe.held_by_queue(board), pending, prices)


# ---- at submit: a job its queue could never admit ------------------------------------------------------
def queue_problem(cluster: Cluster, job: JobSpec, least: Mapping[str, tuple[float, float]] | None = None) -> str | None:
    """Why ``job`` can never be admitted by its queue on ``cluster`` (one line), or None.

    A queue the cluster lacks, or a job whose smallest configuration (``least``: per GPU model its least
    GPUs and GiB charge, ``smallest_charges`` when not given) exceeds its queue's nominal quota plus its
    borrowing limit on every GPU model. A job no GPU can hold at all is left to the planner
    (``no-feasible-config``).
    """
    queues = cluster.queues
    if not queues:
        return None
    spec = queues.get(job.queue)
    if spec is None:
        return f"queue {job.queue!r} is not a queue of cluster {cluster.name!r} (queues: {', '.join(queues.names)})"
    least = smallest_charges(cluster, job) if least is None else least
    if not least:
        return None
    worst: str | None = None
    for model, (gpus, gib) in least.items():
        nominal, borrow = spec.nominal_of(model), spec.borrowing_of(model)
        if gpus <= nominal.gpus + borrow.gpus + TOL and gib <= nominal.memory_gib + borrow.memory_gib + TOL:
            return None
        limit = f"nominal quota {nominal.gpus:g} plus borrowing limit {borrow.gpus:g} GPUs"
        if gpus <= nominal.gpus + borrow.gpus + TOL:
            limit = f"nominal quota {nominal.memory_gib:g} plus borrowing limit {borrow.memory_gib:g} GiB of GPU memory"
        worst = worst or (f"queue {spec.name}: its smallest configuration is charged {gpus:.2f} GPUs ({gib:.1f} GiB) of {model}, "
                          f"more than the queue's {limit}")
    return worst


def smallest_charges(cluster: Cluster, job: JobSpec) -> dict[str, tuple[float, float]]:
    """Per GPU model of ``cluster``: the least charge (GPUs, GiB of GPU memory) of any configuration of the job
    that fits one of its GPUs, by the estimators (what the planner uses before anything is measured)."""
    out: dict[str, tuple[float, float]] = {}
    for model in cluster.gpu_models():
        usable = cluster.usable_mem_mib(model)
        best: tuple[float, float] | None = None
        for knobs in cartesian(job.knob_space):
            p = estimate(job.workload, knobs, model)
            if p is None or p.resources.gpu_mem_mib > usable:
                continue
            dp = gang_size(knobs)
            c = (charge(dp, p.resources.sm, p.resources.gpu_mem_mib, usable, 1.0, cluster.max_jobs_per_gpu),
                 dp * p.resources.gpu_mem_mib / GIB)
            best = c if best is None or c < best else best
        if best is not None:
            out[model.name] = best
    return out
