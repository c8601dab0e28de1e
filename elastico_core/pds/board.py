"""The per-epoch GPU board: what sits where, with indexes that make best-fit placement cheap.

All placement goes through ``Board.try_place`` / ``Board.remove``; both keep every GPU's memory (less
M_sys), SM share and job count within bounds, and every node's CPU and host memory, so no sequence
of board operations can over-commit a device (the property tests drive it at random). A placement
that does not fit is answered with a typed ``Status``, never an exception; ``Board.place`` is for
placements the caller knows fit (it raises, as a broken invariant). "Try, and undo if it does not
hold" is one mechanism: ``with board.tentative() as tx: ... tx.commit()`` (Volcano's Statement):
whatever ``tx`` placed or removed is undone on leaving the block uncommitted.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum, auto
from types import TracebackType
from typing import Protocol

import numpy as np

from elastico_core.model.cluster import Cluster

EPS = 1e-6
_FIRST = operator.itemgetter(0)
_MEM, _SM, _CPU, _HOST, _DP, _MODEL = (operator.attrgetter(f) for f in ("mem", "sm", "cpu", "host", "dp", "model"))


class Fit(Enum):
    """The answer to "may this job go on these GPUs?" (the first check that fails, in this order)."""

    OK = auto()
    PLACED = auto()  # the job is on the board already
    GANG = auto()  # not ``dp`` distinct GPUs
    MODEL = auto()  # a GPU of another model
    GPU = auto()  # a GPU lacks memory, SM share or a slot
    NODE = auto()  # a node lacks CPU or host memory
    QUOTA = auto()  # the job's queue has no quota left for it (``pds/quotas.py``)


@dataclass(frozen=True, slots=True)
class Status:
    """A typed placement answer; ``where`` is the GPU (or node, for ``NODE``) that refused, -1 if none."""

    code: Fit = Fit.OK
    where: int = -1

    @property
    def ok(self) -> bool:
        return self.code is Fit.OK


FITS = Status()


@dataclass(frozen=True, slots=True)
class Demand:
    """What one option needs per GPU, plus on how many GPUs and of which model."""

    mem: float
    sm: float
    cpu: float
    host: float
    dp: int
    model: int
    one_node: bool = False  # a tensor-parallel gang: its all-reduces run every layer, so never across nodes


@dataclass(frozen=True, slots=True, eq=False)
class DemandColumns:
    """Many Demands as aligned arrays (what bulk placement sums)."""

    mem: np.ndarray
    sm: np.ndarray
    cpu: np.ndarray
    host: np.ndarray
    dp: np.ndarray  # intp
    model: np.ndarray  # intp

    @classmethod
    def of(cls, demands: Sequence[Demand]) -> DemandColumns:
        return cls(
            np.array(list(map(_MEM, demands)), dtype=float),
            np.array(list(map(_SM, demands)), dtype=float),
            np.array(list(map(_CPU, demands)), dtype=float),
            np.array(list(map(_HOST, demands)), dtype=float),
            np.array(list(map(_DP, demands)), dtype=np.intp),
            np.array(list(map(_MODEL, demands)), dtype=np.intp),
        )


@dataclass(frozen=True, eq=False)
class Layout:
    """The static part of a board (per cluster), computed once and shared by every round's board."""

    cluster: Cluster
    sm_capacity: float
    gpu_ids: tuple[str, ...]
    gpu_index: dict[str, int]
    gpu_node: tuple[int, ...]
    gpu_model: tuple[int, ...]
    cap_mem: tuple[float, ...]
    node_cpu: tuple[float, ...]
    node_host: tuple[float, ...]
    node_model: tuple[int, ...]
    node_gpus: tuple[tuple[int, ...], ...]
    n_models: int
    model_index: dict[str, int]
    gpu_node_array: np.ndarray  # gpu_node and gpu_model as arrays, for the bulk placement's sums
    gpu_model_array: np.ndarray
    # an empty board's free memory, SM, node CPU and host memory as read-only arrays (derived), for
    # bulk placement onto a fresh board
    empty_arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = field(init=False, repr=False)

    @classmethod
    def of(cls, cluster: Cluster, sm_capacity: float = 1.0) -> Layout:
        models = cluster.gpu_models()
        model_ix = {m.name: i for i, m in enumerate(models)}
        node_ix = {n.name: i for i, n in enumerate(cluster.nodes)}
        gpu_node = tuple(node_ix[g.node] for g in cluster.gpus)
        node_gpus: list[list[int]] = [[] for _ in cluster.nodes]
        for g, n in enumerate(gpu_node):
            node_gpus[n].append(g)
        return cls(
            cluster=cluster,
            sm_capacity=sm_capacity,
            gpu_ids=tuple(g.id for g in cluster.gpus),
            gpu_index={g.id: i for i, g in enumerate(cluster.gpus)},
            gpu_node=gpu_node,
            gpu_model=tuple(model_ix[g.model.name] for g in cluster.gpus),
            cap_mem=tuple(cluster.usable_mem_mib(g.model) for g in cluster.gpus),
            node_cpu=tuple(float(n.cpu_cores) for n in cluster.nodes),
            node_host=tuple(float(n.host_mem_mib) for n in cluster.nodes),
            node_model=tuple(model_ix[n.gpu.name] if n.gpu_count else -1 for n in cluster.nodes),
            node_gpus=tuple(tuple(x) for x in node_gpus),
            n_models=len(models),
            model_index=model_ix,
            gpu_node_array=np.array(gpu_node, dtype=np.intp),
            gpu_model_array=np.array([model_ix[g.model.name] for g in cluster.gpus], dtype=np.intp),
        )

    def __post_init__(self) -> None:
        arrays = (
            np.array(self.cap_mem, dtype=float),
            np.full(len(self.gpu_ids), float(self.sm_capacity)),
            np.array(self.node_cpu, dtype=float),
            np.array(self.node_host, dtype=float),
        )
        for a in arrays:
            a.flags.writeable = False
        object.__setattr__(self, "empty_arrays", arrays)


class QuotaCheck(Protocol):
    """What a board asks of the queues' quotas at each placement (``pds.quotas.QuotaLedger``)."""

    def admits(self, job: int, d: Demand) -> bool: ...
    def take_if(self, job: int, d: Demand) -> bool:
        """Charge the job's queue if it ``admits`` the job, in one step; whether it did."""
        ...
    def give(self, job: int, d: Demand) -> None: ...
    def take_all(self, jobs: Sequence[int], columns: DemandColumns) -> bool:
        """Charge all of them at once if they fit together (changing nothing otherwise); whether they did."""
        ...


class Board:
    """Mutable occupancy of every GPU for one planning round (never shared across threads).

    ``quota``: with queues, the epoch's quota ledger; every placement is charged to the job's queue
    and refused (``Fit.QUOTA``) when the queue has no room left, every removal gives it back.
    """

    def __init__(self, cluster: Cluster | Layout, sm_capacity: float = 1.0) -> None:
        layout = cluster if isinstance(cluster, Layout) else Layout.of(cluster, sm_capacity)
        self.layout = layout
        self.cluster = layout.cluster
        self.max_per_gpu = layout.cluster.max_jobs_per_gpu
        self.gpu_ids = layout.gpu_ids
        self.gpu_index = layout.gpu_index
        self.gpu_node = layout.gpu_node
        self.gpu_model = layout.gpu_model
        self.cap_mem = layout.cap_mem
        self.cap_sm = layout.sm_capacity
        self.free_mem = list(layout.cap_mem)
        self.free_sm = [layout.sm_capacity] * len(layout.gpu_ids)
        self.occ: list[list[int]] = [[] for _ in layout.gpu_ids]
        self.node_free_cpu = list(layout.node_cpu)
        self.node_free_host = list(layout.node_host)
        self.node_model = layout.node_model
        self.node_gpus = layout.node_gpus
        self.n_models = layout.n_models
        # indexes: partially occupied GPUs sorted by free memory; empty GPUs per node; nodes by empties
        self.partial: list[list[tuple[float, int]]] = [[] for _ in range(layout.n_models)]
        self.node_empty: list[list[int]] = [list(reversed(gs)) for gs in layout.node_gpus]
        self.buckets: list[dict[int, set[int]]] = [{} for _ in range(layout.n_models)]
        for n, gs in enumerate(layout.node_gpus):
            if gs:
                self.buckets[self.node_model[n]].setdefault(len(gs), set()).add(n)
        self.where: dict[int, tuple[int, Demand, tuple[int, ...]]] = {}
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None  # option_arrays, until the next change
        self._pristine = True  # nothing placed yet, ever: free capacity is exactly the layout's
        self._partial_cache: dict[int, np.ndarray] = {}  # per model, ``_partial_free``, until the next change
        self.version = 0  # counts changes: a view derived from the board is current while this holds
        self.quota: QuotaCheck | None = None

    # ---- queries ------------------------------------------------------------------------------
    def fits_gpu(self, g: int, d: Demand, extra_mem: float = 0.0, extra_sm: float = 0.0, replacing: int = -1) -> bool:
        slots = len(self.occ[g]) - (1 if replacing in self.occ[g] else 0)
        return (
            slots < self.max_per_gpu
            and self.free_mem[g] + extra_mem >= d.mem - EPS
            and self.free_sm[g] + extra_sm >= d.sm - EPS
        )

    def fits_node(self, n: int, d: Demand, count: int, extra_cpu: float = 0.0, extra_host: float = 0.0) -> bool:
        return (
            self.node_free_cpu[n] + extra_cpu >= d.cpu * count - EPS
            and self.node_free_host[n] + extra_host >= d.host * count - EPS
        )

    def partners(self, g: int) -> list[int]:
        return self.occ[g]

    def jobs(self) -> list[int]:
        return list(self.where)

    def placed(self, job: int) -> bool:
        return job in self.where

    def option_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Placed jobs and their option indexes as two aligned arrays (for vectorised table lookups).

        Kept until the board changes (read-only: several stages read them between two changes)."""
        if self._arrays is None:
            n = len(self.where)
            js = np.fromiter(self.where.keys(), dtype=np.intp, count=n)
            ks = np.fromiter(map(_FIRST, self.where.values()), dtype=np.intp, count=n)
            js.flags.writeable = False
            ks.flags.writeable = False
            self._arrays = (js, ks)
        return self._arrays

    # ---- mutation -----------------------------------------------------------------------------
    def _changed(self) -> None:
        """Every mutation calls this: the kept option arrays are stale, the board no longer empty."""
        self._arrays = None
        self._pristine = False
        self.version += 1
        if self._partial_cache:
            self._partial_cache = {}

    def _index_remove(self, g: int) -> None:
        n_occ = len(self.occ[g])
        m = self.gpu_model[g]
        if n_occ == 0:
            node = self.gpu_node[g]
            self.node_empty[node].remove(g)
            self._bucket_move(node, len(self.node_empty[node]) + 1, len(self.node_empty[node]))
        elif n_occ < self.max_per_gpu:
            lst = self.partial[m]
            i = bisect.bisect_left(lst, (self.free_mem[g], g))
            if i < len(lst) and lst[i][1] == g:
                lst.pop(i)

    def _index_add(self, g: int) -> None:
        n_occ = len(self.occ[g])
        m = self.gpu_model[g]
        if n_occ == 0:
            node = self.gpu_node[g]
            self.node_empty[node].append(g)
            self._bucket_move(node, len(self.node_empty[node]) - 1, len(self.node_empty[node]))
        elif n_occ < self.max_per_gpu:
            bisect.insort(self.partial[m], (self.free_mem[g], g))

    def _bucket_move(self, node: int, old: int, new: int) -> None:
        b = self.buckets[self.node_model[node]]
        if old > 0:
            b[old].discard(node)
            if not b[old]:
                del b[old]
        if new > 0:
            b.setdefault(new, set()).add(node)

    def place(self, job: int, option: int, d: Demand, gpus: Sequence[int]) -> None:
        """Place a job the caller knows fits; a refusal here is a broken invariant (ValueError)."""
        status = self.try_place(job, option, d, gpus)
        if status.code is Fit.PLACED:
            raise ValueError(f"job {job} is already placed")
        if not status.ok:
            raise ValueError(f"job {job} does not fit on {[self.gpu_ids[g] for g in gpus]} ({status.code.name})")

    def try_place(self, job: int, option: int, d: Demand, gpus: Sequence[int]) -> Status:
        """Place option ``option`` of ``job`` on ``gpus`` if every check holds; else change nothing and say why."""
        if job in self.where:
            return Status(Fit.PLACED)
        if len(gpus) == 1:
            return self._place_one(job, option, d, gpus[0])
        if len(gpus) != d.dp or len(set(gpus)) != len(gpus):
            return Status(Fit.GANG)
        per_node: dict[int, int] = {}
        for g in gpus:
            if self.gpu_model[g] != d.model:
                return Status(Fit.MODEL, g)
            if not self.fits_gpu(g, d):
                return Status(Fit.GPU, g)
            per_node[self.gpu_node[g]] = per_node.get(self.gpu_node[g], 0) + 1
        for n, count in per_node.items():
            if not self.fits_node(n, d, count):
                return Status(Fit.NODE, n)
        if self.quota is not None and not self.quota.take_if(job, d):
            return Status(Fit.QUOTA)
        for g in gpus:
            self._index_remove(g)
            self.free_mem[g] -= d.mem
            self.free_sm[g] -= d.sm
            self.occ[g].append(job)
            self._index_add(g)
        for n, count in per_node.items():
            self.node_free_cpu[n] -= d.cpu * count
            self.node_free_host[n] -= d.host * count
        self.where[job] = (option, d, tuple(gpus))
        self._changed()
        return FITS

    def _place_one(self, job: int, option: int, d: Demand, g: int) -> Status:
        """``try_place`` for one GPU, with the same checks and no per-node bookkeeping dict."""
        n = self.gpu_node[g]
        if self.gpu_model[g] != d.model:
            return Status(Fit.MODEL, g)
        if not self.fits_gpu(g, d):
            return Status(Fit.GPU, g)
        if not self.fits_node(n, d, 1):
            return Status(Fit.NODE, n)
        if self.quota is not None and not self.quota.take_if(job, d):
            return Status(Fit.QUOTA)
        self._index_remove(g)
        self.free_mem[g] -= d.mem
        self.free_sm[g] -= d.sm
        self.occ[g].append(job)
        self._index_add(g)
        self.node_free_cpu[n] -= d.cpu
        self.node_free_host[n] -= d.host
        self.where[job] = (option, d, (g,))
        self._changed()
        return FITS

    def tentative(self) -> Statement:
        """A transaction over this board: undone on leaving its ``with`` block unless committed."""
        return Statement(self)

    def place_many(self, items: Sequence[tuple[int, int, Demand, tuple[int, ...]]]) -> None:
        """Place many jobs at once (the sticky running jobs): totals are checked per GPU and node
        before anything changes, so either all fit or ValueError is raised and nothing moved (a
        broken invariant: use ``place_columns`` for its typed answer).

        The totals are summed with numpy (every epoch places all running jobs here); free memory
        and SM are then updated job by job, exactly as one-at-a-time placement leaves them.
        """
        if items:
            jobs, options, demands, gangs = zip(*items, strict=True)
            status = self.place_columns(jobs, options, demands, gangs)
            if not status.ok:
                raise ValueError(f"the jobs given do not fit together: {status.code.name} at {status.where}")

    def place_columns(
        self,
        jobs: Sequence[int],
        options: Sequence[int],
        demands: Sequence[Demand],
        gangs: Sequence[tuple[int, ...]],
        columns: DemandColumns | None = None,
    ) -> Status:
        """``place_many`` with its items as aligned sequences (what the planner holds already).

        ``columns``: the demands as arrays when the caller has them (the planner reads them off its
        epoch table), equal to the Demand fields. Nothing changes unless the answer is ``OK``.
        """
        n = len(jobs)
        if not n:
            return FITS
        where, layout = self.where, self.layout
        # the new entries of ``where``, built first: their count shows a job given twice
        entries = dict(zip(jobs, zip(options, demands, map(tuple, gangs), strict=True), strict=True))
        if len(entries) != n or (where and not where.keys().isdisjoint(entries)):
            return Status(Fit.PLACED)
        if columns is None:
            columns = DemandColumns.of(demands)
        lens = np.fromiter(map(len, gangs), dtype=np.intp, count=n)
        dp = columns.dp
        if (lens != dp).any():
            return Status(Fit.GANG)
        total = int(lens.sum())
        flat = np.fromiter(itertools.chain.from_iterable(gangs), dtype=np.intp, count=total)
        owner = np.repeat(np.arange(n), lens)
        model = columns.model[owner]
        wrong = layout.gpu_model_array[flat] != model
        if wrong.any():
            return Status(Fit.MODEL, int(flat[int(np.flatnonzero(wrong)[0])]))
        mem = columns.mem[owner]
        sm = columns.sm[owner]
        n_gpus, n_nodes = len(self.gpu_ids), len(self.node_gpus)
        add_mem = np.bincount(flat, weights=mem, minlength=n_gpus)
        add_sm = np.bincount(flat, weights=sm, minlength=n_gpus)
        add_n = np.bincount(flat, minlength=n_gpus)
        if self._pristine:  # the usual case (each round's sticky jobs): no list-to-array conversions
            free_mem, free_sm, free_cpu, free_host = layout.empty_arrays
            occupied = np.zeros(n_gpus, dtype=np.intp)
        else:
            free_mem, free_sm = np.asarray(self.free_mem), np.asarray(self.free_sm)
            free_cpu, free_host = np.asarray(self.node_free_cpu), np.asarray(self.node_free_host)
            occupied = np.fromiter(map(len, self.occ), dtype=np.intp, count=n_gpus)
        bad = (add_mem > free_mem + EPS) | (add_sm > free_sm + EPS) | (add_n + occupied > self.max_per_gpu)
        if bad.any():
            return Status(Fit.GPU, int(np.flatnonzero(bad)[0]))
        nodes = layout.gpu_node_array[flat]
        cpu = columns.cpu[owner]
        host = columns.host[owner]
        add_cpu = np.bincount(nodes, weights=cpu, minlength=n_nodes)
        add_host = np.bincount(nodes, weights=host, minlength=n_nodes)
        node_bad = (add_cpu > free_cpu + EPS) | (add_host > free_host + EPS)
        if node_bad.any():
            return Status(Fit.NODE, int(np.flatnonzero(node_bad)[0]))
        if self.quota is not None and not self.quota.take_all(jobs, columns):
            return Status(Fit.QUOTA)
        # indexes are updated in bulk (once per node and model, not per GPU): the result is the same
        # as placing one job at a time, since GPUs only gain jobs here
        touched_nodes = list(dict.fromkeys(nodes.tolist()))  # in first-use order, as one at a time would
        empties_before = {nd: len(self.node_empty[nd]) for nd in touched_nodes}
        # ufunc.at subtracts in index order, so a GPU given two jobs ends at (free - m1) - m2, as
        # one-at-a-time placement leaves it
        free_mem = free_mem.copy()
        np.subtract.at(free_mem, flat, mem)
        self.free_mem[:] = free_mem.tolist()
        free_sm = free_sm.copy()
        np.subtract.at(free_sm, flat, sm)
        self.free_sm[:] = free_sm.tolist()
        occ = self.occ
        for job, g in zip(jobs if total == n else np.asarray(jobs)[owner].tolist(), flat.tolist(), strict=True):
            occ[g].append(job)
        where.update(entries)
        self._changed()
        # an untouched node subtracts 0.0: the same floats as subtracting per touched node
        self.node_free_cpu[:] = (free_cpu - add_cpu).tolist()
        self.node_free_host[:] = (free_host - add_host).tolist()
        for nd in touched_nodes:
            empty = [g for g in self.node_empty[nd] if not occ[g]]
            if len(empty) != empties_before[nd]:
                self.node_empty[nd] = empty
                self._bucket_move(nd, empties_before[nd], len(empty))
        touched = np.flatnonzero(add_n)
        changed = set(touched.tolist())
        room = touched[(occupied + add_n)[touched] < self.max_per_gpu]
        room_model = layout.gpu_model_array[room]
        for m in np.unique(layout.gpu_model_array[touched]).tolist():
            mine = room[room_model == m]
            kept = [e for e in self.partial[m] if e[1] not in changed]
            if not kept:  # a fresh board (every round's sticky jobs): sorted by (free memory, GPU) in numpy
                order = np.lexsort((mine, free_mem[mine]))
                self.partial[m] = list(zip(free_mem[mine[order]].tolist(), mine[order].tolist(), strict=True))
            elif len(mine) or len(kept) != len(self.partial[m]):
                self.partial[m] = sorted(kept + list(zip(free_mem[mine].tolist(), mine.tolist(), strict=True)))
        return FITS

    def to_back(self, job: int) -> None:
        """Move a placed job to the back of the board's orders, where ``remove`` and ``place`` at
        the same spot would leave it, without the capacity and index bookkeeping (nothing changes)."""
        entry = self.where.pop(job)
        self.where[job] = entry
        self._changed()
        for g in entry[2]:
            on = self.occ[g]
            on.remove(job)
            on.append(job)

    def remove(self, job: int) -> tuple[int, Demand, tuple[int, ...]]:
        option, d, gpus = self.where.pop(job)
        self._changed()
        if self.quota is not None:
            self.quota.give(job, d)
        for g in gpus:
            self._index_remove(g)
            self.free_mem[g] += d.mem
            self.free_sm[g] += d.sm
            self.occ[g].remove(job)
            self._index_add(g)
            n = self.gpu_node[g]
            self.node_free_cpu[n] += d.cpu
            self.node_free_host[n] += d.host
        return option, d, gpus

    # ---- search -------------------------------------------------------------------------------
    def find_single(self, d: Demand, avoid: Iterable[int] = (), scan: int = 48) -> int | None:
        """Best fit by memory among shared GPUs, else an empty GPU on the fullest node."""
        forbid = set(avoid)
        lst = self.partial[d.model]
        i = bisect.bisect_left(lst, (d.mem - EPS, -1))
        for _, g in lst[i : i + scan]:
            if (
                self.free_sm[g] >= d.sm - EPS
                and self.fits_node(self.gpu_node[g], d, 1)
                and (not forbid or not forbid.intersection(self.occ[g]))
            ):
                return g
        return self.find_empty(d, 1)

    def find_empty(self, d: Demand, count: int) -> int | None:
        buckets = self.buckets[d.model]
        for size in sorted(buckets):
            if size < count:
                continue
            for node in buckets[size]:
                if self.fits_node(node, d, count):
                    return self.node_empty[node][-1]
        return None

    def could_hold(self, model: np.ndarray, mem: np.ndarray, dp: np.ndarray) -> np.ndarray:
        """A cheap necessary test per option: are there ``dp`` GPUs (empty, or shared with enough free
        memory) of its model? False means no placement search can succeed. O(log G) per option, in numpy."""
        if self.n_models == 1:
            return self.could_hold_each(0, mem, dp) if len(mem) else np.zeros(0, dtype=bool)
        out = np.zeros(len(mem), dtype=bool)
        if not len(mem):
            return out
        models = np.unique(model)
        for m in models.tolist():
            sel = slice(None) if len(models) == 1 else model == m
            out[sel] = self.could_hold_each(m, mem[sel], dp[sel])
        return out

    def could_hold_each(self, model: int, mem: np.ndarray, dp: np.ndarray | int) -> np.ndarray:
        """``could_hold`` for options all of one GPU model."""
        free = self._partial_free(model)
        able = len(free) - np.searchsorted(free, np.asarray(mem, dtype=float) - EPS, side="left")
        return able + self.empty_count(model) >= dp

    def could_hold_one(self, model: int, mem: float, dp: int) -> bool:
        """``could_hold`` for one option, on the board's sorted index (no array built)."""
        lst = self.partial[model]
        return len(lst) - bisect.bisect_left(lst, (mem - EPS, -1)) + self.empty_count(model) >= dp

    def _partial_free(self, model: int) -> np.ndarray:
        """The free memory of the shared GPUs of ``model`` with a slot left, ascending (kept until a change)."""
        cache = self._partial_cache
        hit = cache.get(model)
        if hit is None:
            lst = self.partial[model]
            hit = cache[model] = np.fromiter(map(_FIRST, lst), dtype=float, count=len(lst))
        return hit

    def empty_count(self, model: int) -> int:
        return sum(size * len(nodes) for size, nodes in self.buckets[model].items())

    def find_empty_gang(self, d: Demand) -> tuple[int, ...] | None:
        """``d.dp`` empty GPUs of one node (or one empty GPU), or None."""
        buckets = self.buckets[d.model]
        for size in sorted(buckets):
            if size < d.dp:
                continue
            for node in buckets[size]:
                if self.fits_node(node, d, d.dp):
                    return tuple(self.node_empty[node][-d.dp :])
        return None

    def whole_gpus(self, d: Demand) -> tuple[int, ...] | None:
        """``d.dp`` empty GPUs, consolidated (Volcano's binpack, Lucid's consolidate placement): the
        fullest node that still has room (best fit), else whole nodes with the most empty GPUs first.

        Unlike ``find_empty_gang`` it is deterministic in the cluster's order (ties go to the lower
        node, a node's GPUs are taken lowest first), which the baselines' published traces rely on.
        Nodes lacking CPU or host memory for their share are passed over.
        """
        buckets = self.buckets[d.model]
        if self.empty_count(d.model) < d.dp:
            return None
        sizes = sorted(buckets)
        for size in sizes:
            if size < d.dp:
                continue
            for node in sorted(buckets[size]):
                if self.fits_node(node, d, d.dp):
                    return tuple(sorted(self.node_empty[node])[: d.dp])
        if d.one_node:
            return None
        chosen: list[int] = []
        for size in reversed(sizes):
            for node in sorted(buckets[size]):
                take = min(size, d.dp - len(chosen))
                while take > 0 and not self.fits_node(node, d, take):
                    take -= 1
                chosen.extend(sorted(self.node_empty[node])[:take])
                if len(chosen) == d.dp:
                    return tuple(chosen)
        return None

    def find_gang(self, d: Demand, avoid: Iterable[int] = (), cross_node: bool = True) -> tuple[int, ...] | None:
        """``d.dp`` GPUs: empty GPUs of one node, else fitting GPUs of one node, else across nodes.

        Candidates come from the indexes (shared GPUs with enough free memory, empty GPUs), never
        from a scan of the whole cluster, so a job that fits nowhere fails in O(log G).
        """
        if d.dp == 1:
            g = self.find_single(d, avoid)
            return None if g is None else (g,)
        empty = self.find_empty_gang(d)
        if empty is not None:
            return empty
        forbid = set(avoid)
        lst = self.partial[d.model]
        start = bisect.bisect_left(lst, (d.mem - EPS, -1))
        shared = [g for _, g in lst[start:] if self.free_sm[g] >= d.sm - EPS and not forbid.intersection(self.occ[g])]
        n_empty = self.empty_count(d.model)
        if len(shared) + n_empty < d.dp:
            return None
        by_node: dict[int, list[int]] = {}
        for g in shared:
            by_node.setdefault(self.gpu_node[g], []).append(g)
        for n in by_node:
            by_node[n].extend(self.node_empty[n])
        for n, gs in enumerate(self.node_empty):
            if gs and n not in by_node and self.node_model[n] == d.model:
                by_node[n] = list(gs)
        for n, gs in sorted(by_node.items(), key=lambda item: -len(item[1])):
            if len(gs) >= d.dp and self.fits_node(n, d, d.dp):
                gs.sort(key=lambda g: self.free_mem[g])
                return tuple(gs[: d.dp])
        if not cross_node or d.one_node:
            return None
        chosen: list[int] = []
        for n, gs in sorted(by_node.items(), key=lambda item: -len(item[1])):
            take = min(len(gs), d.dp - len(chosen))
            while take > 0 and not self.fits_node(n, d, take):
                take -= 1
            chosen.extend(sorted(gs, key=lambda g: self.free_mem[g])[:take])
            if len(chosen) == d.dp:
                return tuple(chosen)
        return None

    # ---- reporting ----------------------------------------------------------------------------
    def used_mem(self) -> np.ndarray:
        return np.array(self.cap_mem) - np.array(self.free_mem)

    def check(self) -> None:
        """Raise if any GPU or node is over-committed (used by tests and as a last guard)."""
        tol = -EPS * 10
        if (
            min(self.free_mem, default=0.0) >= tol
            and min(self.free_sm, default=0.0) >= tol
            and max(map(len, self.occ), default=0) <= self.max_per_gpu
            and min(self.node_free_cpu, default=0.0) >= tol
            and min(self.node_free_host, default=0.0) >= tol
        ):
            return
        for g, gid in enumerate(self.gpu_ids):
            if self.free_mem[g] < -EPS * 10 or self.free_sm[g] < -EPS * 10 or len(self.occ[g]) > self.max_per_gpu:
                raise AssertionError(f"GPU {gid} over-committed: free_mem={self.free_mem[g]} free_sm={self.free_sm[g]} jobs={self.occ[g]}")
        for n, node in enumerate(self.cluster.nodes):
            if self.node_free_cpu[n] < -EPS * 10 or self.node_free_host[n] < -EPS * 10:
                raise AssertionError(f"node {node.name} over-committed")


Entry = tuple[int, Demand, tuple[int, ...]]  # a placed job's option, demand and GPUs


class Statement:
    """Tentative placement on a board (Volcano's Statement): ``place`` and ``remove`` act at once and
    are recorded; ``commit`` keeps them; ``discard`` (or leaving the ``with`` block uncommitted) puts
    every touched job back as it was, the ones taken off in the order they were taken off."""

    __slots__ = ("_before", "_open", "_taken", "board")

    def __init__(self, board: Board) -> None:
        self.board = board
        self._before: dict[int, Entry | None] = {}  # each touched job's entry before its first touch
        self._taken: list[int] = []  # jobs that were on the board, in the order they were first taken off
        self._open = True

    def _touch(self, job: int) -> None:
        if job not in self._before:
            self._before[job] = self.board.where.get(job)

    def place(self, job: int, option: int, d: Demand, gpus: Sequence[int]) -> Status:
        self._touch(job)
        return self.board.try_place(job, option, d, gpus)

    def remove(self, job: int) -> Entry:
        self._touch(job)
        if self._before[job] is not None and job not in self._taken:
            self._taken.append(job)
        return self.board.remove(job)

    def commit(self) -> None:
        self._open = False

    def discard(self) -> None:
        if not self._open:
            return
        self._open = False
        board = self.board
        for job in list(self._before):
            if job in board.where and board.where[job] is not self._before[job]:
                board.remove(job)
        for job in self._taken:
            entry = self._before[job]
            if entry is not None and job not in board.where:
                board.place(job, *entry)

    def __enter__(self) -> Statement:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.discard()
