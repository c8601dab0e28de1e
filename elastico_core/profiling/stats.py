"""Steady-state statistics of a measurement window (pure functions)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from elastico_core.model.launch import StepEvent

TRIM_LO, TRIM_HI = 0.10, 0.90


def trimmed(values: Sequence[float], lo: float = TRIM_LO, hi: float = TRIM_HI) -> list[float]:
    """The values between the ``lo`` and ``hi`` quantiles (ends cut by rank; all kept below 3 values)."""
    xs = sorted(v for v in values if not math.isnan(v))
    n = len(xs)
    if n < 3:
        return xs
    cut_lo, cut_hi = math.floor(n * lo), math.ceil(n * hi)
    return xs[cut_lo:cut_hi] or xs


def trimmed_mean(values: Sequence[float], lo: float = TRIM_LO, hi: float = TRIM_HI) -> float:
    kept = trimmed(values, lo, hi)
    return sum(kept) / len(kept) if kept else math.nan


ON_CPU_KEEP = 0.8  # an iteration is undisturbed when it got >= 80 % of the on-CPU share the job usually gets


def undisturbed(steps: Sequence[StepEvent]) -> list[StepEvent]:
    """Drop iterations during which the process was descheduled (another process took its core).

    The reference is the 90th percentile of on-CPU shares (CPU time / wall time) in the window, so a job
    that shares its core by design (a co-located pair) keeps its iterations and only extra disturbance
    is removed. Without CPU times (a GPU job reporting none) every iteration is kept.
    """
    timed = [s for s in steps if s.dt_s > 0]
    if not timed or any(math.isnan(s.cpu_s) for s in timed):
        return timed
    shares = sorted(s.cpu_s / s.dt_s for s in timed)
    ref = shares[min(len(shares) - 1, int(0.9 * len(shares)))]
    kept = [s for s in timed if s.cpu_s / s.dt_s >= ON_CPU_KEEP * ref]
    return kept if len(kept) >= max(3, len(timed) // 4) else timed


def throughput(steps: Sequence[StepEvent], lo: float = TRIM_LO, hi: float = TRIM_HI, *, solo: bool = True) -> float:
    """Training: samples per second over the (undisturbed) iterations whose rate lies in the 10-90 % band.

    Iterations are trimmed by rate (a garbage-collection pause or a checkpoint write is an outlier),
    then the kept ones are aggregated as sum(n) / sum(dt) — a mean of ratios would overweight short steps.
    ``solo=False`` (a co-located pair) keeps descheduled iterations: there, sharing the core is the point.
    """
    timed = undisturbed(steps) if solo else [s for s in steps if s.dt_s > 0]
    if not timed:
        return math.nan
    band = trimmed(sorted(s.rate for s in timed), lo, hi)
    low, high = band[0], band[-1]
    kept = [s for s in timed if low <= s.rate <= high]
    total_dt = sum(s.dt_s for s in kept)
    return sum(s.n for s in kept) / total_dt if total_dt > 0 else math.nan


def per_second(steps: Sequence[StepEvent], start: float, end: float) -> list[float]:
    """Samples finished in each 1-s bin of [start, end) — the 1 s resolution timeline of §4.1."""
    bins = [0.0] * max(1, math.ceil(end - start))
    for s in steps:
        i = int(s.t - start)
        if 0 <= i < len(bins):
            bins[i] += s.n
    return bins


def binned_throughput(
    steps: Sequence[StepEvent], lo: float = TRIM_LO, hi: float = TRIM_HI, *, solo: bool = True
) -> float:
    """Serving loops: the 10-90 % trimmed mean of per-second throughputs of the undisturbed iterations.

    Iterations are not trimmed one by one: the slow ones are prefills, real work that prefix caching
    shortens. Each 1-s group's throughput is sum(n) / sum(dt); with fewer than three groups, the whole.
    """
    kept = undisturbed(steps) if solo else [s for s in steps if s.dt_s > 0]
    if not kept:
        return math.nan
    start = min(s.t - s.dt_s for s in kept)
    groups: dict[int, list[StepEvent]] = {}
    for s in kept:
        groups.setdefault(int(s.t - start), []).append(s)
    rates = [sum(s.n for s in g) / sum(s.dt_s for s in g) for g in groups.values() if sum(s.dt_s for s in g) > 0]
    if len(rates) < 3:
        total_dt = sum(s.dt_s for s in kept)
        return sum(s.n for s in kept) / total_dt if total_dt > 0 else math.nan
    return trimmed_mean(rates, lo, hi)
