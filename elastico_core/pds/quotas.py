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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from types import MappingProxyType

import numpy as np

from elastico_core.esp.pricing import ExtraGoods
from elastico_core.model.cluster import Cluster
from elastico_core.model.knobs import Knobs
from elastico_core.model.queues import GIB, QueueSet
from elastico_core.pds.board import EPS, Board, Demand, DemandColumns, Layout
from elastico_core.pds.options import EpochTable

RES = ("gpus", "mem")  # the two quota resources, in GPUs' worth
TOL = 1e-6
CHARGES_KEPT = 100_000  # demands whose charges a ``QuotaLayout`` remembers before it starts afresh


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
    ceiling: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (Q, M, 2) nominal + borrowing limit
    _start: list[LedgerStart] = field(default_factory=list, compare=False, repr=False)
    _flat: list[FlatQuotas] = field(default_factory=list, compare=False, repr=False)
    # id(Demand) -> (the Demand, its charge in GPUs and memory): option sets, and so their demands, live
    # across epochs, so every epoch's ledgers share what earlier ones computed (bounded by ``CHARGES_KEPT``)
    charge_memo: dict[int, tuple[Demand, float, float]] = field(default_factory=dict, compare=False, repr=False)

    def flat(self) -> FlatQuotas:
        """The quotas as flat lists, computed once per cluster."""
        if not self._flat:
            self._flat.append(FlatQuotas(
                2 * len(self.models), self.nominal.reshape(-1).tolist(), self.borrow.reshape(-1).tolist(),
                self.lend.reshape(-1).tolist(), self.weight.astype(float).tolist(), self.pool.reshape(-1).tolist(),
                tuple(m.tolist() for m in self.cohorts), np.flatnonzero(self.cohort >= 0).tolist()))
        return self._flat[0]

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
        ceiling = nominal + borrow
        for arr in (nominal, borrow, lend, ceiling):  # shared by every epoch's entitlement (``Entitlement.cap``): never written
            arr.flags.writeable = False
        return cls(queues, models, usable, nominal, borrow, lend, cohort, np.array([q.weight for q in queues.queues]), pool,
                   layout.sm_capacity, cluster.max_jobs_per_gpu, whole_gpus, layout, names, members, ceiling)

    @property
    def n_queues(self) -> int:
        return len(self.queues)

    def goods(self) -> tuple[str, ...]:
        """The market's names of the quota goods: ``queue:<queue>:<model>:gpus`` and ``...:mem``."""
        return self.names

    def charges(self, table: EpochTable | _Rows) -> tuple[np.ndarray, np.ndarray]:
        """Every option's charge (``model.queues.charge``), GPUs and memory, (J, K) each."""
        return self.charge_arrays(table.dp, table.mem, table.sm, table.model)

    def charge_arrays(self, dp: np.ndarray, mem: np.ndarray, sm: np.ndarray, model: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Many options' charges (GPUs, memory) from their columns: ``charges`` on flat arrays, as the
        epoch (``QuotaEpoch.charges_at``) and the ledger (a round's sticky jobs) ask for them."""
        dp = dp.astype(float)
        if self.whole_gpus:
            return dp, dp
        mem = mem / (self.usable.take(model) if len(self.usable) > 1 else self.usable[0])
        if math.isfinite(self.sm_capacity):
            return dp * np.maximum(np.maximum(sm / self.sm_capacity, mem), 1.0 / self.max_jobs), dp * mem
        return dp * np.maximum(mem, 1.0 / self.max_jobs), dp * mem  # max(0, x) = x: memory is never negative

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
    return np.array(_filled(wants, pool.astype(float).tolist(), weight.tolist()))[:, None] * np.maximum(want, 0.0)


def _filled(wants: list[list[float]], caps: list[float], ws: list[float]) -> list[float]:
    """``fair_share``'s progressive filling on plain lists (wants already non-negative): each claimant's
    fraction of its want granted."""
    n, g = len(wants), len(caps)
    # enough for everyone (each resource's total want within the pool, and none wanted of an empty one):
    # the filling would end with every claimant holding its whole want
    if all(sum(row[r] for row in wants) <= caps[r] and (caps[r] > TOL or all(row[r] <= TOL for row in wants)) for r in range(g)):
        return [1.0] * n
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
    return got


@dataclass(frozen=True, slots=True)
class Entitlement:
    """One epoch's quota arithmetic, (Q, M, 2) each, in GPUs' worth."""

    usage: np.ndarray
    demand: np.ndarray
    lent: np.ndarray  # of its nominal quota, granted to others
    borrowed: np.ndarray  # granted beyond its nominal quota
    cap: np.ndarray  # nominal - lent + borrowed: the most it may hold now


def entitlements(lay: QuotaLayout, usage: np.ndarray, demand: np.ndarray) -> Entitlement:
    """Caps from demand (module doc, step 2); ``usage`` is only carried along.

    On flat lists, cell ``q * B + r`` (``B`` = models x 2): a few queues' worth of numbers, where each
    numpy call would cost more than the arithmetic (this runs every epoch)."""
    fl = lay.flat()
    nom, step = fl.nominal, fl.step
    dem = demand.reshape(-1).tolist()
    want = [min(b, max(d - n, 0.0)) for b, d, n in zip(fl.borrow, dem, nom, strict=True)]  # what each wants to borrow
    # a job's memory charge never exceeds its GPU charge: no queue can use more memory than GPUs' worth
    for i in range(0, len(want), 2):
        want[i + 1] = min(want[i + 1], max(nom[i] + want[i] - nom[i + 1], 0.0))
    if not any(w > TOL for w in want):  # nobody borrows: everyone keeps its nominal quota (read-only arrays, shared)
        nothing = np.zeros_like(lay.nominal)
        return Entitlement(usage, demand, nothing, nothing, lay.nominal)
    idle = [min(c, max(n - d, 0.0)) for c, n, d in zip(fl.lend, nom, dem, strict=True)]  # what each queue can lend
    lent = [0.0] * len(nom)
    borrowed = [0.0] * len(nom)
    ws = fl.weight
    for members in fl.cohorts:
        pool = [sum(idle[q * step + r] for q in members) for r in range(step)]
        wants = [[max(want[q * step + r], 0.0) for r in range(step)] for q in members]
        got = _filled(wants, pool, [ws[q] for q in members])
        total = [0.0] * step
        for q, f, row in zip(members, got, wants, strict=True):
            for r in range(step):
                g = f * row[r]
                borrowed[q * step + r] += g
                total[r] += g
        share = [t / p if p > TOL else 0.0 for t, p in zip(total, pool, strict=True)]
        for q in members:
            for r in range(step):
                lent[q * step + r] = idle[q * step + r] * share[r]
    members = fl.in_cohort
    if members and any(p > TOL for p in fl.pool):  # what the cohorts still want shares the unnamed capacity
        still = [[max(want[q * step + r] - borrowed[q * step + r], 0.0) for r in range(step)] for q in members]
        got = _filled(still, fl.pool, [ws[q] for q in members])
        for q, f, row in zip(members, got, still, strict=True):
            for r in range(step):
                borrowed[q * step + r] += f * row[r]
    shape = lay.nominal.shape
    lent_a, borrowed_a = np.array(lent).reshape(shape), np.array(borrowed).reshape(shape)
    cap = np.array([n - c + b for n, c, b in zip(nom, lent, borrowed, strict=True)]).reshape(shape)
    return Entitlement(usage, demand, lent_a, borrowed_a, cap)


@dataclass(frozen=True, slots=True)
class FlatQuotas:
    """A ``QuotaLayout``'s quotas as flat lists (cell ``q * step + model * 2 + resource``), for the
    per-epoch arithmetic on a handful of numbers."""

    step: int
    nominal: list[float]
    borrow: list[float]
    lend: list[float]
    weight: list[float]
    pool: list[float]  # (M x 2) capacity no queue names
    cohorts: tuple[list[int], ...]
    in_cohort: list[int]


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

    __slots__ = ("_charges", "_last", "_queues", "cohort", "lay", "lend", "lend_c", "n_models", "nominal", "over_c",
                 "pool", "pool_use", "queue_of", "room", "slack", "used")

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
        if len(lay.charge_memo) > CHARGES_KEPT:
            lay.charge_memo.clear()
        self._charges = lay.charge_memo  # by Demand (options share them): charge
        # the last placement ``admits`` answered yes to, while nothing changed since: (job, Demand, fit).
        # The packer asks ``admits`` before it searches for GPUs and the board then asks ``take_if``.
        self._last: tuple[int, Demand, tuple[int, float, float]] | None = None

    def _need(self, jobs: Sequence[int], columns: DemandColumns) -> tuple[list[int], list[float]] | None:
        """The cells the placements charge and by how much (None: none is charged)."""
        idx = np.asarray(jobs, dtype=np.intp)
        n = len(self._queues)
        q = np.where(idx < n, self._queues[np.minimum(idx, n - 1)], -1) if len(idx) and n else np.full(len(idx), -1)
        keep = q >= 0
        if keep.all():  # the usual case: every job has a queue, no mask to apply
            model, dp, sm, mem = columns.model, columns.dp, columns.sm, columns.mem
        elif keep.any():
            q = q[keep]
            model, dp, sm, mem = columns.model[keep], columns.dp[keep], columns.sm[keep], columns.mem[keep]
        else:
            return None
        g, m = self.lay.charge_arrays(dp, mem, sm, model)
        cell = 2 * (q * self.n_models + model) if self.n_models > 1 else 2 * q
        size = len(self.room)
        need = np.bincount(np.concatenate([cell, cell + 1]), weights=np.concatenate([g, m]), minlength=size)
        touched = np.flatnonzero(need).tolist()
        return touched, need[touched].tolist()

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

    def _apply_pair(self, i: int, g: float, m: float) -> None:
        """Charge (or, negative, give back) ``g`` GPUs at cell ``i`` and ``m`` of memory at ``i + 1``:
        ``_shift`` of each, inline and applied (the board calls this for every placement)."""
        self._last = None
        step = 2 * self.n_models
        c = self.cohort[i // step]
        used, room = self.used, self.room
        if c < 0:  # no cohort: only the queue's own room moves
            used[i] += g
            used[i + 1] += m
            room[i] -= g
            room[i + 1] -= m
            return
        nominal, lend, over_c, lend_c = self.nominal, self.lend, self.over_c, self.lend_c
        pool, pool_use, slack = self.pool, self.pool_use, self.slack
        ci = c * step + i % step
        for k, kc, amount in ((i, ci, g), (i + 1, ci + 1, m)):  # the two resources touch different cells
            n, cap = nominal[k], lend[k]
            u = used[k]
            u2 = u + amount
            oc0, lc0 = over_c[kc], lend_c[kc]
            oc = oc0 + max(0.0, u2 - n) - max(0.0, u - n)
            lc = lc0 + min(cap, max(0.0, n - u2)) - min(cap, max(0.0, n - u))
            grow = max(0.0, oc - lc) - max(0.0, oc0 - lc0)
            used[k] = u2
            room[k] -= amount
            over_c[kc], lend_c[kc] = oc, lc
            pi = kc % step
            if grow:
                pool_use[pi] += grow
                self._reslack(pi)
            else:  # the unnamed capacity in use is unchanged: of every cohort cell only this one's slack moves
                slack[kc] = max(0.0, lc - oc) + pool[pi] - pool_use[pi]

    def _reslack(self, pi: int) -> None:
        """The slack of every cohort cell of model-resource ``pi`` (they share the unnamed capacity)."""
        left = self.pool[pi] - self.pool_use[pi]
        step = 2 * self.n_models
        for ci in range(pi, len(self.slack), step):
            self.slack[ci] = max(0.0, self.lend_c[ci] - self.over_c[ci]) + left

    def _fit(self, job: int, d: Demand) -> tuple[int, float, float] | None:
        """The placement's ledger cell and charges (GPUs, memory) when its queue and cohort have room for
        it (cell -1: its job is not charged), None when they have not. The board asks this of every
        placement, so the common case (room in the queue, within the cohort's slack) reads each list once."""
        queue_of = self.queue_of
        q = queue_of[job] if job < len(queue_of) else -1
        if q < 0:
            return -1, 0.0, 0.0
        i = 2 * (q * self.n_models + d.model)
        g, m = self._charge(d)
        room = self.room
        if room[i] < g - EPS or room[i + 1] < m - EPS:
            return None
        c = self.cohort[q]
        if c >= 0:
            ci = 2 * (c * self.n_models + d.model)
            slack = self.slack
            if (slack[ci] < g + EPS or slack[ci + 1] < m + EPS) and not (self._fits(i, g) and self._fits(i + 1, m)):
                return None
        return i, g, m

    def admits(self, job: int, d: Demand) -> bool:
        """Would its queue and cohort take this placement now (``take_if`` without charging it)?"""
        fit = self._fit(job, d)
        if fit is None:
            return False
        self._last = (job, d, fit)
        return True

    def take(self, job: int, d: Demand) -> None:
        """Charge the job's queue whatever its room (what already runs: the simulator's baselines' ledger)."""
        i = self._cell(job, d)
        if i >= 0:
            g, m = self._charge(d)
            self._apply_pair(i, g, m)

    def take_if(self, job: int, d: Demand) -> bool:
        """Charge the placement if its queue and cohort have room for it (``admits``); whether it did."""
        last = self._last
        fit = last[2] if last is not None and last[0] == job and last[1] is d else self._fit(job, d)
        if fit is None:
            return False
        i, g, m = fit
        if i >= 0:
            self._apply_pair(i, g, m)
        return True

    def give(self, job: int, d: Demand) -> None:
        i = self._cell(job, d)
        if i >= 0:
            g, m = self._charge(d)
            self._apply_pair(i, -g, -m)

    def take_all(self, jobs: Sequence[int], columns: DemandColumns) -> bool:
        """Charge many placements at once (the sticky running jobs of a round), each queue and cohort checked on
        the totals; nothing changes unless they all fit. Charges are summed per cell in numpy."""
        need = self._need(jobs, columns)
        if need is None:
            return True
        touched, amounts = need
        room = self.room
        if any(room[i] < a - EPS for i, a in zip(touched, amounts, strict=True)):
            return False
        used, over_c, lend_c, pool_use = list(self.used), list(self.over_c), list(self.lend_c), list(self.pool_use)
        cohort, nominal, lend, step = self.cohort, self.nominal, self.lend, 2 * self.n_models
        for i, a in zip(touched, amounts, strict=True):  # ``_shift`` inline: a round's running jobs touch every cell
            c = cohort[i // step]
            u = used[i]
            used[i] = u2 = u + a
            if c >= 0:
                ci = c * step + i % step
                n, cap = nominal[i], lend[i]
                oc0, lc0 = over_c[ci], lend_c[ci]
                over_c[ci] = oc = oc0 + max(0.0, u2 - n) - max(0.0, u - n)
                lend_c[ci] = lc = lc0 + min(cap, max(0.0, n - u2)) - min(cap, max(0.0, n - u))
                pool_use[ci % step] += max(0.0, oc - lc) - max(0.0, oc0 - lc0)
        if not all(u <= max(p, b) + EPS for u, p, b in zip(pool_use, self.pool, self.pool_use, strict=True)):
            return False
        for i, a in zip(touched, amounts, strict=True):
            room[i] -= a
        self._last = None
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
        queue_of = np.fromiter(map(get, queues, repeat(-1)), dtype=np.intp, count=len(queues))
        unknown: dict[int, str] = {}
        if (queue_of < 0).any():  # running: not charged (keeps running); pending: the phantom queue Q, no room
            rows = np.flatnonzero(queue_of < 0)
            unknown = {j: queues[j] for j in rows.tolist()}
            queue_of[rows] = np.where(table.running[rows], -1, n_q)
        qe = cls(lay, table, queue_of, unknown, NO_ENTITLEMENT, _EMPTY, owed, reclaim)
        if ent is None:  # running jobs as they run, each pending job at its most valuable configuration
            usage, wanted = qe._usage_and_wants()
            ent = entitlements(lay, usage, usage + wanted)
        else:
            usage = qe.sum_at(table.current, table.running)
        held = usage if base_usage is None else base_usage
        over = np.asarray((held > ent.cap + TOL).reshape(n_q, -1).any(axis=1), dtype=bool)
        limit = np.zeros((n_q + 1, len(lay.models), 2))
        # below its fair share a queue may grow to it (a lender: to its nominal quota, as its cohort gives
        # it back, which the ledger checks); above, it keeps what it holds until it is held to its share
        # at a reclaim's deadline; never more than nominal + borrowing limit
        keep = np.maximum(ent.cap, lay.nominal)
        if over.any():
            keep = np.where(over[:, None, None], held, keep)
        for q in reclaim.deadline:
            keep[q] = ent.cap[q]
        np.minimum(keep, lay.ceiling, out=limit[:n_q])
        qe.ent, qe.limit, qe.over = ent, limit, over
        return qe

    def charges_at(self, rows: np.ndarray, options: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The charge (GPUs, memory) of option ``options[i]`` of row ``rows[i]`` (``model.queues.charge``)."""
        g, m, _ = self._charges_of(rows * self.table.dp.shape[1] + options)
        return g, m

    def _charges_of(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``charges_at`` of flat (J x K) indexes (one 1-D take per column, not a 2-D gather), and each
        option's GPU model."""
        t = self.table
        model = t.model.take(cells)
        g, m = self.lay.charge_arrays(t.dp.take(cells), t.mem.take(cells), t.sm.take(cells), model)
        return g, m, model

    def least_of(self, rows: Sequence[int]) -> np.ndarray:
        """Each row's option of least charge (GPUs, then memory), kept once asked."""
        todo = [j for j in rows if j not in self._least]
        if todo:
            r = np.asarray(todo, dtype=np.intp)
            gpus, mem = self.lay.charges(_rows_of(self.table, r))
            masked = np.where(self.table.valid[r], _least_key(gpus, mem), np.inf)
            for j, k in zip(todo, np.argmin(masked, axis=1).tolist(), strict=True):
                self._least[j] = k
        return np.array([self._least[j] for j in rows], dtype=np.intp)

    def least_charge(self, j: int) -> tuple[int, int, float, float]:
        """Row j's least option, its GPU model, and its charge (GPUs, memory)."""
        k = int(self.least_of([j])[0])
        g, m = self.charges_at(np.array([j]), np.array([k]))
        return k, int(self.table.model[j, k]), float(g[0]), float(m[0])

    def _usage_and_wants(self) -> tuple[np.ndarray, np.ndarray]:
        """(Q, M, 2) twice: the running rows' charges at their configurations (``sum_at(current, running)``)
        and the pending rows' at their most valuable ones, from one charge computation (every epoch, so in
        as few numpy calls as the usual case allows: every row of a queue, one GPU model)."""
        lay, t = self.lay, self.table
        n_q, n_m = lay.n_queues, len(lay.models)
        q, running = self.queue_of, t.running
        option = t.current.copy()
        waiting = ~running
        everyone = not self.unknown  # every row's queue is one of the cluster's: none to leave out
        pending = np.flatnonzero(waiting) if everyone else np.flatnonzero(waiting & (q < n_q) & (q >= 0))
        if len(pending):
            option[pending] = np.argmax(np.where(t.valid[pending], t.value[pending], -np.inf), axis=1)
        size = n_q * n_m
        if everyone and not (option < 0).any():
            g, m, model = self._charges_of(np.arange(len(q)) * t.dp.shape[1] + option)
            cell = q + waiting * size if n_m == 1 else q * n_m + model + waiting * size
        else:
            rows = np.flatnonzero((q >= 0) & (q < n_q) & (option >= 0))
            g, m, model = self._charges_of(rows * t.dp.shape[1] + option[rows])
            cell = q[rows] * n_m + model + waiting[rows] * size
        cell = 2 * cell  # (running or waiting, queue, model, resource), resource last
        out = np.bincount(np.concatenate([cell, cell + 1]), weights=np.concatenate([g, m]), minlength=4 * size)
        out = out.astype(float, copy=False).reshape(2, n_q, n_m, 2)  # (no rows: bincount's zeros are ints)
        return out[0], out[1]

    def least_by_model(self, j: int) -> list[tuple[int, tuple[float, float]]]:
        """Row j's least charge (GPUs, memory) on each GPU model it has a configuration for, least first."""
        t = self.table
        gpus, mem = self.lay.charges(_rows_of(t, np.array([j])))
        key = _least_key(gpus[0], mem[0])
        out = []
        for model in np.unique(t.model[j, t.valid[j]]).tolist():
            k = int(np.argmin(np.where(t.valid[j] & (t.model[j] == model), key, np.inf)))
            out.append((int(model), (float(gpus[0, k]), float(mem[0, k]))))
        return sorted(out, key=lambda x: x[1])

    def sum_at(self, option: np.ndarray, rows_mask: np.ndarray) -> np.ndarray:
        """(Q, M, 2): the charges of ``option[j]`` summed per queue over the rows of ``rows_mask``."""
        lay, t = self.lay, self.table
        n_q, n_m = lay.n_queues, len(lay.models)
        out = np.zeros((n_q, n_m, 2))
        q = self.queue_of
        rows = np.flatnonzero(rows_mask & (q >= 0) & (q < n_q) & (option >= 0))
        if len(rows):
            g, m, model = self._charges_of(rows * t.dp.shape[1] + option[rows])
            cell = q[rows] * n_m + model
            out[..., 0] = np.bincount(cell, weights=g, minlength=n_q * n_m).reshape(n_q, n_m)
            out[..., 1] = np.bincount(cell, weights=m, minlength=n_q * n_m).reshape(n_q, n_m)
        return out

    # ---- what the market and the boards get --------------------------------------------------------
    def goods(self) -> ExtraGoods:
        """The quota goods of ESP's market: capacity the cap, never below what a queue above its cap still
        runs at the smallest (running jobs cannot be priced out; a capacity under that would never clear)."""
        lay, t = self.lay, self.table
        n_q, n_m = lay.n_queues, len(lay.models)
        capacity = np.minimum(self.ent.cap, lay.ceiling)
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


_EMPTY = np.zeros(0)
NO_ENTITLEMENT = Entitlement(*(_EMPTY,) * 5)


@dataclass(frozen=True, slots=True)
class _Rows:
    """The columns ``QuotaLayout.charges`` reads, for some rows of a table."""

    mem: np.ndarray
    sm: np.ndarray
    dp: np.ndarray
    model: np.ndarray


def _least_key(gpus: np.ndarray, mem: np.ndarray) -> np.ndarray:
    """The order of "least charge": GPUs, then memory."""
    return gpus + 1e-3 * mem


def _rows_of(t: EpochTable, rows: np.ndarray) -> _Rows:
    return _Rows(t.mem[rows], t.sm[rows], t.dp[rows], t.model[rows])
