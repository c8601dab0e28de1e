"""Calibrating traced estimates: one efficiency per workload family and GPU model, fitted to measured rows.

A traced estimate's memory is built from the code and is not corrected. Its throughput is the
roofline-and-overhead model of ``rst.from_trace`` at the prior efficiency; what the measured rows
calibrate is how far each workload family (a workload and all its configurations) runs from that model
on a GPU model: a factor ``f_j`` with

    ln f_j = (sum of ln(measured / estimated) over j's rows + LAMBDA x ln f_shared) / (n_j + LAMBDA)

where ``ln f_shared`` is the mean over every measured row of the GPU model: a family measured often
gets its own factor, a family measured once is pulled halfway to the shared one, and a family nobody
measured takes the shared factor. The efficiency reported is the prior times the factor.

Held-out error: every measured configuration is left out in turn, the factors fitted on the rest, the
left-out row predicted; the geometric mean of ``max(m/e, e/m)``, before (the prior) and after.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from elastico_core.model.errors import SpecError
from elastico_core.model.traced import TrainTrace
from elastico_core.rst.from_trace import PRIOR_EFFICIENCY

LAMBDA = 1.0  # prior weight of the shared factor, in rows
FILE = "efficiency.json"


@dataclass(frozen=True, slots=True)
class TracedObservation:
    """One measured configuration beside its traced estimate (prior efficiency) on the same GPU model."""

    workload: str
    knobs: str
    gpu: str
    measured_tput: float
    measured_mem: float
    estimated_tput: float
    estimated_mem: float
    trace: TrainTrace

    def log_ratio(self, quantity: str = "throughput") -> float:
        if quantity == "throughput":
            return math.log(self.measured_tput / self.estimated_tput)
        return math.log(self.measured_mem / self.estimated_mem)


@dataclass(frozen=True, slots=True)
class Efficiencies:
    """Fitted throughput factors of one GPU model: shared, and per workload family (ln)."""

    gpu: str
    shared: float
    families: Mapping[str, float]
    rows: int
    provenance: str = ""

    def log_factor(self, workload: str) -> float:
        return self.families.get(workload, self.shared)

    def efficiency(self, workload: str) -> float:
        return PRIOR_EFFICIENCY * math.exp(self.log_factor(workload))

    def to_dict(self) -> dict[str, object]:
        return {"gpu": self.gpu, "rows": self.rows, "provenance": self.provenance,
                "shared_efficiency": round(PRIOR_EFFICIENCY * math.exp(self.shared), 4),
                "efficiency": {w: round(PRIOR_EFFICIENCY * math.exp(v), 4) for w, v in sorted(self.families.items())}}  # fmt: skip


def fit(obs: Sequence[TracedObservation]) -> Efficiencies:
    """Factors from the observations of one GPU model."""
    if not obs:
        raise SpecError("no measured rows with a trace to calibrate with", field="measured")
    shared = sum(o.log_ratio() for o in obs) / len(obs)
    by: dict[str, list[float]] = {}
    for o in obs:
        by.setdefault(o.workload, []).append(o.log_ratio())
    families = {w: (sum(v) + LAMBDA * shared) / (len(v) + LAMBDA) for w, v in by.items()}
    return Efficiencies(obs[0].gpu, shared, families, len(obs))


def held_out(obs: Sequence[TracedObservation]) -> list[float]:
    """|ln(predicted / measured)| of each row, predicted by factors fitted without it (the prior when alone)."""
    out = []
    for i, row in enumerate(obs):
        rest = [o for j, o in enumerate(obs) if j != i]
        factor = fit(rest).log_factor(row.workload) if rest else 0.0
        out.append(abs(row.log_ratio() - factor))
    return out


def geo(log_errors: Iterable[float]) -> float:
    xs = list(log_errors)
    return math.exp(sum(xs) / len(xs)) if xs else math.nan


@dataclass(frozen=True, slots=True)
class TracedCalibration:
    """The result of calibrating traced estimates against measured rows."""

    before: dict[str, float]
    after: dict[str, float]
    fits: tuple[Efficiencies, ...]
    per_row: tuple[dict[str, object], ...] = field(default=(), repr=False)
    skipped: tuple[str, ...] = ()

    @property
    def rows(self) -> int:
        return len(self.per_row)

    def to_dict(self) -> dict[str, object]:
        return {
            "estimator": "traced",
            "rows": self.rows,
            "before": {f"{q}_ratio": round(v, 4) for q, v in self.before.items()},
            "after": {f"{q}_ratio": round(v, 4) for q, v in self.after.items()},
            "efficiencies": [e.to_dict() for e in self.fits],
            "skipped": list(self.skipped),
            "per_row": list(self.per_row),
        }


def calibrate_traced(obs: Sequence[TracedObservation], skipped: Sequence[str] = ()) -> TracedCalibration:
    """Fit per GPU model, and measure before / after on held-out configurations (memory is not fitted)."""
    if not obs:
        raise SpecError("no measured row has a current trace (run 'elastico profiles trace' first)", field="measured")
    groups: dict[str, list[TracedObservation]] = {}
    for o in obs:
        groups.setdefault(o.gpu, []).append(o)
    before_t, after_t, mem, per_row, fits = [], [], [], [], []
    for group in groups.values():
        fits.append(fit(group))
        errs = held_out(group)
        for o, e in zip(group, errs, strict=True):
            b, m = abs(o.log_ratio()), abs(o.log_ratio("memory"))
            before_t.append(b)
            after_t.append(e)
            mem.append(m)
            per_row.append({"workload": o.workload, "knobs": o.knobs, "gpu": o.gpu,
                            "throughput_before": round(math.exp(b), 4), "throughput_after": round(math.exp(e), 4),
                            "memory_before": round(math.exp(m), 4), "memory_after": round(math.exp(m), 4),
                            "memory_measured_mib": o.measured_mem, "memory_traced_mib": round(o.estimated_mem, 1),
                            "memory_under_estimated": o.estimated_mem < o.measured_mem})  # fmt: skip
    return TracedCalibration(
        before={"throughput": geo(before_t), "memory": geo(mem)},
        after={"throughput": geo(after_t), "memory": geo(mem)},
        fits=tuple(fits),
        per_row=tuple(per_row),
        skipped=tuple(skipped),
    )


def write_efficiencies(folder: Path, fits: Iterable[Efficiencies]) -> Path:
    """Store fitted efficiencies beside the traces (``<profiles>/traced/efficiency.json``), merged by GPU."""
    path = folder / FILE
    data = read_efficiencies_raw(path)
    for e in fits:
        data[e.gpu] = {"shared": e.shared, "families": dict(e.families), "rows": e.rows, "provenance": e.provenance}
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_efficiencies_raw(path: Path) -> dict[str, dict[str, object]]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise SpecError(f"not JSON ({exc})", where=str(path)) from None
    if not isinstance(data, dict):
        raise SpecError("not a JSON object", where=str(path))
    return data


def read_efficiencies(folder: Path) -> dict[str, Efficiencies]:
    """The efficiencies stored for each GPU model; a malformed entry is a SpecError naming the file."""
    path = folder / FILE
    out = {}
    for gpu, raw in read_efficiencies_raw(path).items():
        try:
            fams = {str(k): float(v) for k, v in dict(raw["families"]).items()}  # type: ignore[call-overload]
            shared = float(raw["shared"])  # type: ignore[arg-type]
            if not all(math.isfinite(v) for v in (shared, *fams.values())):
                raise ValueError("a factor is not finite")
            out[gpu] = Efficiencies(gpu, shared, fams, int(raw.get("rows", 0)), str(raw.get("provenance", "")))  # type: ignore[call-overload]
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecError(f"efficiencies of {gpu!r}: {exc}", where=str(path)) from None
    return out
