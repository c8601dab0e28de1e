"""Estimates that learn from measurements: per-workload corrections of the estimators, fitted to measured rows.

The first-principles estimators (``rst.estimators``) are right about shapes (memory grows with the
micro-batch, AMP halves activations) but were off on a real H200 by a geometric mean of ×5 in
throughput and ×2.3 in memory. Calibration fits, for throughput and for memory separately, a
log-linear correction of the estimate:

    ln(measured / estimated) = g·x + w_j·x        x = (1, amp, checkpointing, ln micro-batch ratio, ln dp)

with ``g`` shared by the workloads of one kind on one GPU model and ``w_j`` workload ``j``'s own
deviation (``x`` for inference: 1, prefix caching, ln max_num_seqs, ln max_model_len ratio,
gpu_memory_utilization). The deviations are ridge-penalised, a workload's knob effects ten times more
than its level (workloads differ from their estimates mostly in level): a workload measured in one
configuration gets its own level and the shared knob effects, one measured in many its own effects too.

What an unmeasured workload gets differs by quantity. Throughput errors can be shared (a framework,
driver or input pipeline that slows every job), so whether it takes the shared correction is decided
by leave-one-out on the rows at hand. Memory estimates come from each workload's own shape anchors,
and how wrong they are for one workload says nothing about another (the first H200 rows ranged from
0.04× to 3.2× of the estimate), so an unmeasured workload keeps its memory estimate; the shared part
then only carries knob effects. The ridge penalty is chosen by leave-one-out too.

Held-out error (the figure that says whether calibration helps): every measured configuration is left
out in turn, the correction fitted on the rest (its choices made on the rest too) and the left-out row
predicted; the error of a set is the geometric mean of ``max(m/e, e/m)``, before (the raw estimator)
and after. Pure numpy over frozen values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from elastico_core.model.errors import SpecError
from elastico_core.model.hardware import GpuModel, HardwareSignature, gpu_model
from elastico_core.model.knobs import Knobs, cartesian
from elastico_core.model.profile import Profile, Source
from elastico_core.model.workload import JobKind, Workload
from elastico_core.rst.estimators import estimate

LAMBDAS = (0.1, 0.3, 1.0, 3.0)  # penalties on each workload's own deviation; leave-one-out chooses one
FREE_LEVEL, PINNED_LEVEL = 1e-3, 1e4  # penalty on the shared level: free, or pinned to 0 (the estimate's own)
OWN_SLOPE_FACTOR = 10.0  # a workload's own knob effects are penalised this much more than its own level
GLOBAL_RIDGE = 1e-3  # shared effects: barely penalised (keeps the system solvable with few rows)
QUANTITIES = ("throughput", "memory")
# plausibility: a measured row further than x1000 from its estimate describes another setup (a tiny-scale
# run, a broken counter, 1e-300 MiB) and is left out of the fit; a fitted correction beyond x100 is not
# applied (those configurations keep the plain estimate), so no input can make calibration write 0 MiB
MAX_OBSERVED_RATIO = 1000.0
MAX_CORRECTION = 100.0


def _num(knobs: Knobs, name: str, default: float) -> float:
    value = knobs.get(name, default)
    return float(value) if isinstance(value, (int, float)) and value else default


def features(workload: Workload, knobs: Knobs) -> np.ndarray:
    """The knob vector ``x`` of one configuration (first entry 1: the level)."""
    d = workload.defaults
    if workload.kind is JobKind.TRAIN:
        mb, mb0 = _num(knobs, "micro_batch", 1.0), _num(d, "micro_batch", 1.0)
        return np.array([1.0, float(bool(knobs.get("amp", False))), float(bool(knobs.get("checkpointing", False))),
                         math.log(mb / mb0), math.log(_num(knobs, "dp", 1.0))])  # fmt: skip
    length, length0 = _num(knobs, "max_model_len", 1.0), _num(d, "max_model_len", 1.0)
    return np.array([1.0, float(bool(knobs.get("prefix_caching", False))), math.log(_num(knobs, "max_num_seqs", 1.0)),
                     math.log(length / length0), _num(knobs, "gpu_memory_utilization", 0.9)])  # fmt: skip


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured configuration next to the estimate for it."""

    workload: Workload
    knobs: Knobs
    gpu: GpuModel
    measured_tput: float
    measured_mem: float
    estimated_tput: float
    estimated_mem: float

    def figures(self, quantity: str) -> tuple[float, float]:
        """(measured, estimated)."""
        if quantity == "throughput":
            return self.measured_tput, self.estimated_tput
        return self.measured_mem, self.estimated_mem

    def target(self, quantity: str) -> float:
        measured, estimated = self.figures(quantity)
        return math.log(measured / estimated)

    def log_error(self, quantity: str, log_factor: float) -> float:
        """|ln(predicted / measured)|; a NaN factor (no correction for this workload) predicts the estimate."""
        return abs((0.0 if math.isnan(log_factor) else log_factor) - self.target(quantity))


@dataclass(frozen=True, slots=True)
class Correction:
    """A fitted correction for one (GPU model, job kind): shared effects and each workload's deviation."""

    gpu: str
    kind: JobKind
    workloads: tuple[str, ...]
    shared: Mapping[str, np.ndarray]  # quantity -> g
    own: Mapping[str, Mapping[str, np.ndarray]]  # quantity -> workload -> w_j
    lam: Mapping[str, float]  # quantity -> penalty on own deviations
    transfer: Mapping[str, bool]  # quantity -> does a workload without measured rows take the shared correction
    rows: int

    def log_factor(self, quantity: str, workload: Workload, knobs: Knobs) -> float:
        """ln of the correction; NaN where this quantity of this workload is left at the estimate."""
        return _log_factor(self.shared[quantity], self.own[quantity], self.transfer[quantity], workload, knobs)

    def apply(self, profile: Profile, workload: Workload, gpu: GpuModel) -> Profile | None:
        """The estimate corrected; None where the corrected memory no longer fits the device, or where a
        correction beyond ``MAX_CORRECTION`` would be needed (no plausible calibration moves an estimate that far)."""
        ft, fm = self.log_factor("throughput", workload, profile.knobs), self.log_factor("memory", workload, profile.knobs)
        if any(abs(f) > math.log(MAX_CORRECTION) for f in (ft, fm) if not math.isnan(f)):
            return None
        t = profile.throughput * (1.0 if math.isnan(ft) else math.exp(ft))
        m = profile.resources.gpu_mem_mib * (1.0 if math.isnan(fm) else math.exp(fm))
        if m > gpu.memory_mib:
            return None
        return replace(
            profile,
            throughput=t,
            resources=replace(profile.resources, gpu_mem_mib=round(m, 1)),
            counters=replace(profile.counters, fb_used_mb=round(m, 1)),
        )


def _design(obs: Sequence[Observation], names: Sequence[str]) -> np.ndarray:
    k = len(features(obs[0].workload, obs[0].knobs))
    X = np.zeros((len(obs), k * (1 + len(names))))
    index = {n: i for i, n in enumerate(names)}
    for r, o in enumerate(obs):
        x = features(o.workload, o.knobs)
        X[r, :k] = x
        j = index[o.workload.name]
        X[r, k * (1 + j) : k * (2 + j)] = x
    return X


@dataclass(frozen=True, slots=True)
class _Fit:
    shared: np.ndarray
    own: dict[str, np.ndarray]
    names: tuple[str, ...]
    transfer: bool  # whether a workload without measured rows takes the shared correction (else: the estimate)

    def log_factor(self, o: Observation) -> float:
        return _log_factor(self.shared, self.own, self.transfer, o.workload, o.knobs)


def _log_factor(shared: np.ndarray, own: Mapping[str, np.ndarray], transfer: bool, w: Workload, knobs: Knobs) -> float:
    mine = own.get(w.name)
    if mine is None and not transfer:
        return math.nan  # not corrected: the caller keeps the estimate
    return float((shared + (mine if mine is not None else 0.0)) @ features(w, knobs))


Params = tuple[float, bool]  # (penalty on own deviations, whether unmeasured workloads take the shared part)


def _fit(obs: Sequence[Observation], quantity: str, params: Params) -> _Fit:
    lam, transfer = params
    names = tuple(sorted({o.workload.name for o in obs}))
    X = _design(obs, names)
    y = np.array([o.target(quantity) for o in obs])
    k = len(features(obs[0].workload, obs[0].knobs))
    penalty = np.full(X.shape[1], lam * OWN_SLOPE_FACTOR)
    penalty[k :: k] = lam  # each workload's own level
    penalty[:k] = GLOBAL_RIDGE
    penalty[0] = FREE_LEVEL if transfer else PINNED_LEVEL
    beta = np.linalg.solve(X.T @ X + np.diag(penalty), X.T @ y)
    return _Fit(beta[:k], {n: beta[k * (1 + j) : k * (2 + j)] for j, n in enumerate(names)}, names, transfer)


def _loo_error(obs: Sequence[Observation], quantity: str, params: Params) -> float:
    """Mean absolute log error of leave-one-out predictions with fixed choices."""
    errs = []
    for i, row in enumerate(obs):
        f = _fit([o for j, o in enumerate(obs) if j != i], quantity, params)
        errs.append(row.log_error(quantity, f.log_factor(row)))
    return float(np.mean(errs))


def _choose(obs: Sequence[Observation], quantity: str) -> Params:
    """The penalty (and, for throughput, the treatment of unmeasured workloads) with the least leave-one-out error."""
    transfers = (True, False) if quantity == "throughput" else (False,)
    grid = [(lam, t) for lam in LAMBDAS for t in transfers]
    if len(obs) < 3:
        return LAMBDAS[len(LAMBDAS) // 2], False
    return min(grid, key=lambda g: _loo_error(obs, quantity, g))


def fit(obs: Sequence[Observation]) -> Correction:
    """One correction from the observations of one GPU model and one job kind."""
    if not obs:
        raise SpecError("no measured rows to calibrate with", field="measured")
    shared, own, lam, transfer = {}, {}, {}, {}
    for q in QUANTITIES:
        params = _choose(obs, q)
        f = _fit(obs, q, params)
        shared[q], own[q], lam[q], transfer[q] = f.shared, f.own, params[0], params[1]
    names = tuple(sorted({o.workload.name for o in obs}))
    return Correction(obs[0].gpu.name, obs[0].workload.kind, names, shared, own, lam, transfer, len(obs))


def held_out(obs: Sequence[Observation], quantity: str) -> list[float]:
    """Leave-one-configuration-out log errors after calibration (its choices made without the row)."""
    out = []
    for i, row in enumerate(obs):
        rest = [o for j, o in enumerate(obs) if j != i]
        if not rest:
            out.append(row.log_error(quantity, math.nan))
            continue
        params = _choose(rest, quantity)
        out.append(row.log_error(quantity, _fit(rest, quantity, params).log_factor(row)))
    return out


def geo(log_errors: Iterable[float]) -> float:
    """exp(mean |log error|): the geometric-mean ratio max(m/e, e/m) of a set (1.0 = exact)."""
    xs = list(log_errors)
    return math.exp(sum(xs) / len(xs)) if xs else math.nan


@dataclass(frozen=True, slots=True)
class CalibrationReport:
    rows: int
    before: dict[str, float]
    after: dict[str, float]
    corrections: tuple[Correction, ...]
    skipped: tuple[str, ...] = ()
    per_row: tuple[dict[str, object], ...] = field(default=(), repr=False)

    def to_dict(self) -> dict[str, object]:
        return {
            "before": {f"{q}_ratio": round(v, 4) for q, v in self.before.items()},
            "after": {f"{q}_ratio": round(v, 4) for q, v in self.after.items()},
            "rows": self.rows,
            "groups": [
                {"gpu": c.gpu, "kind": c.kind.value, "rows": c.rows, "workloads": list(c.workloads),
                 "penalty": {q: c.lam[q] for q in QUANTITIES},
                 "unmeasured_workloads": {q: "shared correction" if c.transfer[q] else "estimate" for q in QUANTITIES}}
                for c in self.corrections
            ],
            "skipped": list(self.skipped),
            "per_row": list(self.per_row),
        }


def observations(
    measured: Iterable[Profile], workloads: Mapping[str, Workload]
) -> tuple[list[Observation], list[str]]:
    """Measured rows paired with their estimates; rows that cannot be compared are named in the second list."""
    obs, skipped = [], []
    for p in measured:
        where = f"{p.workload} {p.knobs.to_json()} on {p.signature.key}"
        w = workloads.get(p.workload)
        if w is None:
            skipped.append(f"{where}: not a catalog workload")
            continue
        try:
            gpu = gpu_model(p.signature.gpu)
        except SpecError:
            skipped.append(f"{where}: the estimators do not model {p.signature.gpu!r}")
            continue
        est = estimate(w, p.knobs, gpu)
        if est is None:
            skipped.append(f"{where}: the estimators call this configuration infeasible")
            continue
        values = (p.throughput, p.resources.gpu_mem_mib, est.throughput, est.resources.gpu_mem_mib)
        if not all(math.isfinite(v) and v > 0 for v in values):
            skipped.append(f"{where}: a throughput or memory figure is not a positive number")
            continue
        ratios = (values[0] / values[2], values[1] / values[3])
        if not all(1 / MAX_OBSERVED_RATIO <= r <= MAX_OBSERVED_RATIO for r in ratios):
            skipped.append(f"{where}: measured x{ratios[0]:.3g} throughput, x{ratios[1]:.3g} memory of the estimate "
                           f"(beyond x{MAX_OBSERVED_RATIO:g}: another setup or a broken figure)")  # fmt: skip
            continue
        obs.append(Observation(w, p.knobs, gpu, *values))
    return obs, skipped


def _groups(obs: Sequence[Observation]) -> dict[tuple[str, JobKind], list[Observation]]:
    groups: dict[tuple[str, JobKind], list[Observation]] = {}
    for o in obs:
        groups.setdefault((o.gpu.name, o.workload.kind), []).append(o)
    return groups


def calibrate(measured: Iterable[Profile], workloads: Mapping[str, Workload]) -> CalibrationReport:
    """Fit a correction per (GPU model, job kind) and measure before / after on held-out configurations."""
    obs, skipped = observations(measured, workloads)
    if not obs:
        raise SpecError("no measured row of a catalog workload on a GPU the estimators model", field="measured")
    before: dict[str, list[float]] = {q: [] for q in QUANTITIES}
    after: dict[str, list[float]] = {q: [] for q in QUANTITIES}
    per_row: list[dict[str, object]] = []
    corrections = []
    for group in _groups(obs).values():
        corrections.append(fit(group))
        errs = {q: held_out(group, q) for q in QUANTITIES}
        for i, o in enumerate(group):
            row: dict[str, object] = {"workload": o.workload.name, "knobs": o.knobs.to_json(), "gpu": o.gpu.name}
            for q in QUANTITIES:
                b = abs(o.target(q))
                before[q].append(b)
                after[q].append(errs[q][i])
                row[f"{q}_before"] = round(math.exp(b), 4)
                row[f"{q}_after"] = round(math.exp(errs[q][i]), 4)
            per_row.append(row)
    return CalibrationReport(
        rows=len(obs),
        before={q: geo(before[q]) for q in QUANTITIES},
        after={q: geo(after[q]) for q in QUANTITIES},
        corrections=tuple(corrections),
        skipped=tuple(skipped),
        per_row=tuple(per_row),
    )


def calibrated_profiles(
    correction: Correction, signature: HardwareSignature, workloads: Iterable[Workload], provenance: str
) -> list[Profile]:
    """Every configuration of the given workloads (of the correction's kind) as a calibrated estimate.

    Written with ``source=estimated`` under the measured signature, ``provenance`` saying where the
    correction came from: the planner still prefers measured rows, and takes these for the rest.
    """
    gpu = gpu_model(correction.gpu)
    out = []
    for w in workloads:
        if w.kind is not correction.kind:
            continue
        for knobs in cartesian(w.knobs):
            est = estimate(w, knobs, gpu)
            if est is None:
                continue
            fixed = correction.apply(est, w, gpu)
            if fixed is not None:
                out.append(replace(fixed, signature=signature, source=Source.ESTIMATED, provenance=provenance))
    return out


__all__ = [
    "CalibrationReport",
    "Correction",
    "Observation",
    "calibrate",
    "calibrated_profiles",
    "features",
    "fit",
    "geo",
    "held_out",
    "observations",
]
