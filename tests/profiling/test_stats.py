"""Steady-state statistics: 10-90 % trimming and throughput aggregation."""

from __future__ import annotations

import math

import pytest

from elastico_core.model.launch import StepEvent
from elastico_core.profiling.stats import binned_throughput, per_second, throughput, trimmed, trimmed_mean, undisturbed


def _steps(dts: list[float], n: float = 10.0, t0: float = 100.0) -> list[StepEvent]:
    out, t = [], t0
    for i, dt in enumerate(dts):
        t += dt
        out.append(StepEvent(i + 1, n * (i + 1), n, dt, t))
    return out


def test_trimming_drops_the_tails() -> None:
    values = [1.0] + [5.0] * 18 + [100.0]
    assert trimmed_mean(values) == 5.0
    assert trimmed([3.0, 1.0]) == [1.0, 3.0]  # too few to trim
    assert math.isnan(trimmed_mean([]))


def test_throughput_ignores_a_gc_pause_and_aggregates_by_time() -> None:
    steps = _steps([0.1] * 19 + [2.0])  # one iteration stalled
    assert throughput(steps) == pytest.approx(100.0)
    mixed = _steps([0.1, 0.2] * 10)  # sum(n)/sum(dt), not the mean of rates
    assert throughput(mixed, lo=0.0, hi=1.0) == pytest.approx(200 / 3.0)


def test_per_second_bins_and_binned_throughput() -> None:
    steps = _steps([0.25] * 40, n=5.0)  # 20 tokens per second for 10 s
    bins = per_second(steps, 100.0, 110.0)  # by completion time: the first second holds 3 of its 4 steps
    assert bins == [15.0] + [20.0] * 9
    assert binned_throughput(steps) == pytest.approx(20.0)
    assert binned_throughput(_steps([0.5, 0.5], n=4)) == pytest.approx(8.0)  # under 3 s: sum/sum


def test_descheduled_iterations_are_not_measured() -> None:
    clean = [StepEvent(i, 0, 10, 0.1, 100 + i, cpu_s=0.1) for i in range(16)]
    stolen = [StepEvent(16 + i, 0, 10, 0.2, 120 + i, cpu_s=0.1) for i in range(4)]  # half the core went elsewhere
    assert undisturbed(clean + stolen) == clean
    assert throughput(clean + stolen, lo=0.0, hi=1.0) == pytest.approx(100.0)
    shared = [StepEvent(i, 0, 10, 0.2, 100 + i, cpu_s=0.1) for i in range(10)]  # a co-located pair: all alike
    assert undisturbed(shared) == shared
