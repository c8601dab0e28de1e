"""Each job's feasible configurations as numeric arrays, and the padded per-epoch table built from them.

Options are compiled once per (workload, knob space, floor, GPU model) and cached: profile lookups and
Pareto pruning do not run on the 5-second hot path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from elastico_core.iac.batch import PER_JOB_FEATURES, feature_row
from elastico_core.model.cluster import Cluster
from elastico_core.model.hardware import GpuModel
from elastico_core.model.job import JobSpec, gang_size
from elastico_core.model.knobs import TP_KNOB, Knobs, KnobSpec, cartesian, value_key
from elastico_core.model.plan import Binding, QueueCode, Queued, Shortfall
from elastico_core.model.profile import Profile
from elastico_core.pds.board import Demand
from elastico_core.pds.nodefit import node_shortfall, rooms
from elastico_core.pds.shortfall import render
from elastico_core.rst.estimators import memory_need_mib
from elastico_core.rst.store import ProfileStore


@dataclass(frozen=True, slots=True)
class OptionSet:
    """Feasible, non-dominated configurations of one job over the cluster's GPU models."""

    knobs: tuple[Knobs, ...]
    profiles: tuple[Profile, ...]
    model: np.ndarray  # int, index into Cluster.gpu_models()
    throughput: np.ndarray  # isolated, whole job
    value: np.ndarray  # T / T(c_max): 1 - PerformanceCost of Eq. 7
    mem: np.ndarray  # MiB per GPU
    sm: np.ndarray  # SM share per GPU
    cpu: np.ndarray  # cores per GPU
    host: np.ndarray  # host MiB per GPU
    dp: np.ndarray  # int, GPUs used
    features: np.ndarray  # (K, 14) per-job IAC features
    best_throughput: float
    problem: Queued | None = None  # why the set is empty
    demands: tuple[Demand, ...] = ()  # per option, what the board needs (filled by ``with_demands``)
    packed: np.ndarray = field(default_factory=lambda: np.zeros((0, 8)))  # value, mem, sm, cpu, host, dp, model, throughput
    knob_names: tuple[str, ...] = ()
    knob_codes: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))  # (K, knobs)
    knob_code_of: tuple[dict[str, int], ...] = ()  # per knob: repr(value_key) -> code

    def with_demands(self) -> OptionSet:
        demands = tuple(
            Demand(float(m), float(s), float(c), float(h), int(d), int(mo), d > 1 and TP_KNOB in kn)
            for m, s, c, h, d, mo, kn in zip(
                self.mem, self.sm, self.cpu, self.host, self.dp, self.model, self.knobs, strict=True
            )
        )
        packed = (
            np.column_stack([self.value, self.mem, self.sm, self.cpu, self.host, self.dp, self.model, self.throughput])
            if len(self)
            else np.zeros((0, 8))
        )
        names = tuple(sorted({name for k in self.knobs for name, _ in k.items}))
        code_of: list[dict[str, int]] = [{} for _ in names]
        codes = np.zeros((len(self.knobs), len(names)), dtype=np.int64)
        for i, k in enumerate(self.knobs):
            for c, name in enumerate(names):
                key = repr(value_key(k.get(name)))  # type: ignore[arg-type]
                codes[i, c] = code_of[c].setdefault(key, len(code_of[c]))
        return replace(self, demands=demands, packed=packed, knob_names=names, knob_codes=codes, knob_code_of=tuple(code_of))

    def subset(self, idx: np.ndarray) -> OptionSet:
        """The options at ``idx``, derived arrays sliced rather than recomputed."""
        return OptionSet(
            knobs=tuple(self.knobs[i] for i in idx),
            profiles=tuple(self.profiles[i] for i in idx),
            model=self.model[idx],
            throughput=self.throughput[idx],
            value=self.value[idx],
            mem=self.mem[idx],
            sm=self.sm[idx],
            cpu=self.cpu[idx],
            host=self.host[idx],
            dp=self.dp[idx],
            features=self.features[idx],
            best_throughput=self.best_throughput,
            demands=tuple(self.demands[i] for i in idx) if self.demands else (),
            packed=self.packed[idx] if len(self.packed) else self.packed,
            knob_names=self.knob_names,
            knob_codes=self.knob_codes[idx] if len(self.knob_codes) else self.knob_codes,
            knob_code_of=self.knob_code_of,
        )

    def changed_knobs(self, knobs: Knobs) -> np.ndarray:
        """(K, knobs) booleans: which knob of each option differs from ``knobs``."""
        cur = np.array([m.get(repr(value_key(knobs.get(n))), -1) for n, m in zip(self.knob_names, self.knob_code_of, strict=True)])  # type: ignore[arg-type]
        return self.knob_codes != cur[None, :]

    def __len__(self) -> int:
        return len(self.knobs)

    def index_of(self, knobs: Knobs, model: int) -> int:
        for i, k in enumerate(self.knobs):
            if (k is knobs or k == knobs) and int(self.model[i]) == model:
                return i
        return -1


def _pareto_keep(value: np.ndarray, res: np.ndarray) -> np.ndarray:
    """Mask of options no other option beats: value >= and every resource <= (one strictly better)."""
    n = len(value)
    if n <= 1:
        return np.ones(n, dtype=bool)
    ge_v = value[None, :] >= value[:, None] - 1e-12  # [i, k]: k at least as valuable as i
    le_r = np.all(res[None, :, :] <= res[:, None, :] + 1e-9, axis=2)
    strictly = (value[None, :] > value[:, None] + 1e-12) | np.any(res[None, :, :] < res[:, None, :] - 1e-9, axis=2)
    dominated = np.any(ge_v & le_r & strictly, axis=1)
    # identical duplicates: keep the first of each group
    return ~dominated


@dataclass
class OptionCompiler:
    """Compiles and caches OptionSets for a cluster and a profile store."""

    cluster: Cluster
    store: ProfileStore
    sm_capacity: float = 1.0
    _cache: dict[tuple[object, ...], OptionSet] = field(default_factory=dict)

    def clear(self) -> None:
        self._cache.clear()

    def options(self, job: JobSpec, keep: Knobs | None = None) -> OptionSet:
        """The job's options: compiled once per (workload, knob space), floored per job, and with a
        running job's current configuration ``keep`` added back if pruning or the floor removed it."""
        key = (job.workload, job.knob_space)
        base = self._cache.get(key)
        if base is None:
            base = self._compile(job, None).with_demands()
            self._cache[key] = base
        out = base
        if base.problem is None and job.floor > 0:
            fkey = (key, float(job.floor))
            floored = self._cache.get(fkey)
            if floored is None:
                floored = self._floored(job, base)
                self._cache[fkey] = floored
            out = floored
        if keep is not None and {n for n, _ in keep.items} != {s.name for s in job.knob_space}:
            keep = None  # a running configuration from another knob space cannot be kept
        if keep is not None and keep not in out.knobs:
            kkey = (key, float(job.floor), keep)
            kept = self._cache.get(kkey)
            if kept is None:
                kept = self._with_kept(job, out, keep).with_demands()
                self._cache[kkey] = kept
            out = kept
        return out

    def _with_kept(self, job: JobSpec, opts: OptionSet, keep: Knobs) -> OptionSet:
        """``opts`` plus the running configuration on every GPU model it fits (so it can stay put)."""
        extra = self._compile(job, keep, only=keep)
        if not len(extra):
            return opts
        if opts.problem is not None or not len(opts):
            return replace(extra, value=extra.throughput / max(opts.best_throughput, extra.best_throughput, 1e-12))
        cat = np.concatenate
        return OptionSet(
            knobs=opts.knobs + extra.knobs,
            profiles=opts.profiles + extra.profiles,
            model=cat([opts.model, extra.model]),
            throughput=cat([opts.throughput, extra.throughput]),
            value=cat([opts.value, extra.throughput / opts.best_throughput]),
            mem=cat([opts.mem, extra.mem]),
            sm=cat([opts.sm, extra.sm]),
            cpu=cat([opts.cpu, extra.cpu]),
            host=cat([opts.host, extra.host]),
            dp=cat([opts.dp, extra.dp]),
            features=cat([opts.features, extra.features]),
            best_throughput=opts.best_throughput,
        )

    def _floored(self, job: JobSpec, base: OptionSet) -> OptionSet:
        mask = base.throughput >= job.floor
        if mask.all():
            return base
        if not mask.any():
            short = Shortfall(Binding.FLOOR, float(job.floor), float(base.throughput.max()))
            code = QueueCode.FLOOR_UNREACHABLE
            return self._empty_set(Queued(job.id, code, render(code, short, job.workload.unit), short), base.best_throughput)
        return base.subset(np.flatnonzero(mask))

    def _compile(self, job: JobSpec, keep: Knobs | None, only: Knobs | None = None) -> OptionSet:
        models = self.cluster.gpu_models()
        gpus_per_model = {m.name: sum(n.gpu_count for n in self.cluster.nodes if n.gpu.name == m.name) for m in models}
        signature = {m.name: n.signature for n in self.cluster.nodes for m in models if n.gpu.name == m.name}
        nodes = {m.name: rooms(self.cluster, m.name) for m in models}
        rows: list[tuple[int, Profile]] = []
        best_any = 0.0
        # least GPU memory, SM share and GPUs beyond the model's count of any configuration (for the reason)
        least_mem = least_sm = least_extra = np.inf
        # of the configurations that fit a GPU, the node-level shortfall nearest to fitting (for the reason)
        node_short: tuple[float, Shortfall] | None = None
        for mi, model in enumerate(models):
            usable = self.cluster.usable_mem_mib(model)
            for knobs in (only,) if only is not None else _space(job.knob_space):
                profile = self.store.lookup(job.workload, knobs, model, signature.get(model.name))
                if profile is None:  # cannot run on this GPU at all: what memory it would need, for the reason
                    mib = memory_need_mib(job.workload, knobs, model)
                    least_mem = min(least_mem, mib if mib is not None else np.inf)
                    continue
                best_any = max(best_any, profile.throughput)
                dp = gang_size(knobs)
                least_mem = min(least_mem, profile.resources.gpu_mem_mib)
                least_sm = min(least_sm, profile.resources.sm)
                least_extra = min(least_extra, dp - gpus_per_model[model.name])
                fits = (
                    profile.resources.gpu_mem_mib <= usable
                    and profile.resources.sm <= self.sm_capacity + 1e-9
                    and dp <= gpus_per_model[model.name]
                )
                if not fits:
                    continue
                need = profile.resources
                lack = node_shortfall(nodes[model.name], need.cpu_cores, need.host_mem_mib, dp, dp > 1 and TP_KNOB in knobs)
                if lack is None:
                    rows.append((mi, profile))
                    continue
                binding, need_n, most, where = lack
                gap = (need_n - most) / need_n if need_n > 0 else 0.0
                if node_short is None or gap < node_short[0] - 1e-12:
                    node_short = (gap, Shortfall(binding, need_n, most, where or None))
        if not rows:
            return self._empty(job, models, best_any, (least_mem, least_sm, least_extra),
                               node_short[1] if node_short else None)
        model_idx = np.array([mi for mi, _ in rows], dtype=np.int64)
        tput = np.array([p.throughput for _, p in rows])
        res = np.array(
            [
                (
                    p.resources.gpu_mem_mib,
                    p.resources.sm,
                    p.resources.cpu_cores,
                    p.resources.host_mem_mib,
                    float(gang_size(p.knobs)),
                )
                for _, p in rows
            ]
        )
        value = tput / best_any
        keep_mask = np.zeros(len(rows), dtype=bool)
        for mi in np.unique(model_idx):
            sel = np.flatnonzero(model_idx == mi)
            keep_mask[sel[_pareto_keep(value[sel], res[sel])]] = True
        if keep is not None:
            keep_mask |= np.array([p.knobs == keep for _, p in rows])
        idx = np.flatnonzero(keep_mask)
        kept = [rows[i] for i in idx]
        return OptionSet(
            knobs=tuple(p.knobs for _, p in kept),
            profiles=tuple(p for _, p in kept),
            model=model_idx[idx],
            throughput=tput[idx],
            value=value[idx],
            mem=res[idx, 0],
            sm=res[idx, 1],
            cpu=res[idx, 2],
            host=res[idx, 3],
            dp=res[idx, 4].astype(np.int64),
            features=np.array([feature_row(job.workload, p) for _, p in kept], dtype=np.float64).reshape(len(kept), len(PER_JOB_FEATURES)),
            best_throughput=best_any,
        )

    def _empty(self, job: JobSpec, models: Sequence[GpuModel], best: float, smallest: tuple[float, float, float],
               node_short: Shortfall | None = None) -> OptionSet:
        """The set of a job no configuration of which fits the cluster, with the resource that rules it out:
        a GPU's memory or SMs, too few GPUs, or (for configurations a GPU could hold) a node's host memory or
        CPU cores, with the largest node's figure."""
        usable = max(self.cluster.usable_mem_mib(m) for m in models)
        most_gpus = max(sum(n.gpu_count for n in self.cluster.nodes if n.gpu.name == m.name) for m in models)
        mem, sm, extra_gpus = (float(x) for x in smallest)
        if node_short is not None:
            short = node_short
        elif not np.isfinite(mem):  # no profile and no memory figure at all: nothing can reach any throughput
            short = Shortfall(Binding.FLOOR, float(job.floor), 0.0)
        elif mem > usable:
            short = Shortfall(Binding.GPU_MEMORY, mem, float(usable))
        elif sm > self.sm_capacity + 1e-9:
            short = Shortfall(Binding.SM, sm, float(self.sm_capacity))
        else:
            short = Shortfall(Binding.GPU_SLOT, float(most_gpus + extra_gpus), float(most_gpus))
        code = QueueCode.NO_FEASIBLE_CONFIG
        return self._empty_set(Queued(job.id, code, render(code, short, job.workload.unit), short), best)

    @staticmethod
    def _empty_set(problem: Queued, best: float) -> OptionSet:
        z = np.zeros(0)
        return OptionSet((), (), z.astype(np.int64), z, z, z, z, z, z, z.astype(np.int64),
                         np.zeros((0, len(PER_JOB_FEATURES))), best, problem)


def _space(specs: tuple[KnobSpec, ...]) -> list[Knobs]:
    return list(cartesian(specs))


@dataclass(frozen=True, slots=True)
class EpochTable:
    """All candidate jobs' options padded to (J, K) matrices; invalid cells hold ``valid = False``."""

    job_ids: tuple[str, ...]
    sets: tuple[OptionSet, ...]
    valid: np.ndarray  # bool (J, K)
    model: np.ndarray  # int (J, K)
    value: np.ndarray  # w_j * T/T_max, (J, K)
    mem: np.ndarray
    sm: np.ndarray
    cpu: np.ndarray
    host: np.ndarray
    dp: np.ndarray  # int
    weight: np.ndarray  # (J,)
    switch: np.ndarray  # switching cost of each option for running jobs, (J, K)
    current: np.ndarray  # int (J,): option index of the running configuration, -1 if pending
    running: np.ndarray  # bool (J,)
    throughput: np.ndarray  # isolated throughput of each option, (J, K)

    @property
    def shape(self) -> tuple[int, int]:
        return self.valid.shape  # type: ignore[return-value]


_PACKED = ("value", "mem", "sm", "cpu", "host", "dp", "model", "throughput")  # OptionSet.packed columns
# an absent option: invalid, dp 1, model 0, everything else 0
_FILL: dict[str, tuple[type, float]] = {
    "valid": (bool, 0), "model": (np.int64, 0), "value": (np.float64, 0.0), "mem": (np.float64, 0.0),
    "sm": (np.float64, 0.0), "cpu": (np.float64, 0.0), "host": (np.float64, 0.0), "dp": (np.int64, 1),
    "switch": (np.float64, 0.0), "throughput": (np.float64, 0.0),
}


_BLOCK = (*_PACKED, "valid", "switch")  # the columns of put_many's staging block, in order
_VALUE, _VALID, _SWITCH = (_BLOCK.index(c) for c in ("value", "valid", "switch"))
_BLOCK_FILL = np.array([float(_FILL[c][1]) for c in _BLOCK])


class RowStore:
    """Every planned job's rows of the epoch table at a fixed slot, one array per column.

    An epoch's table is one gather of slots per column, and only the jobs whose options, weight or
    running configuration changed are written (most epochs: a few), instead of scattering every
    option set into padded arrays each epoch.
    """

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.cols: dict[str, np.ndarray] = {c: np.zeros((0, 1), dtype=t) for c, (t, _) in _FILL.items()}
        self.weight = np.zeros(0)
        self.current = np.zeros(0, dtype=np.int64)
        self.lengths = np.zeros(0, dtype=np.intp)
        self.free: list[int] = []

    @property
    def width(self) -> int:
        return self.cols["valid"].shape[1]

    def _resize(self, rows: int, width: int) -> None:
        for c, (t, fill) in _FILL.items():
            old = self.cols[c]
            new: np.ndarray = np.full((rows, width), fill, dtype=t)
            new[: old.shape[0], : old.shape[1]] = old
            self.cols[c] = new
        for name in ("weight", "current", "lengths"):
            old = getattr(self, name)
            new = np.zeros(rows, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def put_many(self, items: Sequence[tuple[int, OptionSet, float, int, np.ndarray | None]]) -> list[int]:
        """Write jobs' rows, each (old slot or -1, options, weight, current option, switching costs per unit
        of weight), in one pass per column; returns their slots (a job keeps its old slot). The weight w_j
        scales the row's value and switching costs (Eq. 7) here, in one place."""
        if not items:
            return []
        rows = len(self.weight)
        fresh = sum(1 for it in items if it[0] < 0)
        widest = max(len(it[1].knobs) for it in items)
        if fresh > len(self.free):
            grow = max(64, rows, fresh - len(self.free))
            self._resize(rows + grow, max(self.width, widest))
            self.free = list(range(rows + grow - 1, rows - 1, -1)) + self.free
        elif widest > self.width:  # a wider option set: every column is widened once
            self._resize(rows, widest)
        slots = [it[0] if it[0] >= 0 else self.free.pop() for it in items]
        block = np.empty((len(items), self.width, len(_BLOCK)))
        block[:] = _BLOCK_FILL
        for i, (_slot, opts, _w, _cur, sw) in enumerate(items):
            n = len(opts.knobs)
            if n:
                block[i, :n, : len(_PACKED)] = opts.packed
                block[i, :n, _VALID] = 1.0
                if sw is not None:
                    block[i, : len(sw), _SWITCH] = sw
        weights = np.array([it[2] for it in items], dtype=np.float64)
        block[:, :, _VALUE] *= weights[:, None]
        block[:, :, _SWITCH] *= weights[:, None]
        at = np.array(slots, dtype=np.intp)
        for c, col in self.cols.items():
            col[at] = block[:, :, _BLOCK.index(c)] > 0.5 if col.dtype == bool else block[:, :, _BLOCK.index(c)]
        self.weight[at] = weights
        self.current[at] = [it[3] for it in items]
        self.lengths[at] = [len(it[1].knobs) for it in items]
        return slots

    def release(self, slot: int) -> None:
        self.free.append(slot)

    def table(self, slots: np.ndarray, job_ids: Sequence[str], sets: Sequence[OptionSet]) -> EpochTable:
        """The epoch table of the jobs at ``slots``: K is the widest of their option sets."""
        width = int(self.lengths.take(slots).max(initial=0)) or 1
        full = width == self.width

        def col(c: str) -> np.ndarray:
            a = self.cols[c].take(slots, axis=0)
            return a if full else np.ascontiguousarray(a[:, :width])

        cur = self.current.take(slots)
        return EpochTable(
            tuple(job_ids), tuple(sets), col("valid"), col("model"), col("value"), col("mem"), col("sm"), col("cpu"),
            col("host"), col("dp"), self.weight.take(slots), col("switch"), cur, cur >= 0, col("throughput"),
        )


def model_index(cluster: Cluster) -> Mapping[str, int]:
    return {m.name: i for i, m in enumerate(cluster.gpu_models())}
