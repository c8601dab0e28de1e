"""Efficiency per workload family: fitted from measured rows, judged on held-out configurations."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from elastico_core.model.errors import SpecError
from elastico_core.rst.efficiency import (
    LAMBDA,
    TracedObservation,
    calibrate_traced,
    fit,
    held_out,
    read_efficiencies,
    write_efficiencies,
)
from elastico_core.rst.from_trace import PRIOR_EFFICIENCY
from tests.unit.rst.test_traced import trace


def obs(workload: str, ratio: float, mem_ratio: float = 1.0) -> TracedObservation:
    return TracedObservation(workload, "{}", "h200-141gb", 100.0 * ratio, 1000.0 * mem_ratio, 100.0, 1000.0, trace())


def test_a_family_gets_its_own_factor_pulled_to_the_shared_one() -> None:
    rows = [obs("a", 2.0), obs("a", 2.0), obs("b", 0.5)]
    f = fit(rows)
    shared = (2 * math.log(2.0) + math.log(0.5)) / 3
    assert f.shared == pytest.approx(shared)
    assert f.log_factor("a") == pytest.approx((2 * math.log(2.0) + LAMBDA * shared) / (2 + LAMBDA))
    assert f.log_factor("never-measured") == pytest.approx(shared)
    assert f.efficiency("a") == pytest.approx(PRIOR_EFFICIENCY * math.exp(f.log_factor("a")))


def test_held_out_rows_are_predicted_without_themselves() -> None:
    rows = [obs("a", 1.5), obs("a", 1.5), obs("a", 1.5), obs("b", 1.5)]
    assert all(e < 1e-12 for e in held_out(rows))  # a consistent offset is learnt from the others
    assert held_out([obs("a", 2.0)]) == [pytest.approx(math.log(2.0))]  # alone: the prior


def test_calibration_reports_memory_unfitted_and_flags_under_estimates() -> None:
    report = calibrate_traced([obs("a", 2.0, 1.2), obs("a", 2.0, 0.8), obs("b", 1.0, 1.0)])
    assert report.after["throughput"] < report.before["throughput"]
    assert report.after["memory"] == report.before["memory"]
    assert [r["memory_under_estimated"] for r in report.per_row] == [True, False, False]
    with pytest.raises(SpecError, match="profiles trace"):
        calibrate_traced([])


def test_efficiencies_round_trip_and_a_damaged_file_is_named(tmp_path: Path) -> None:
    f = fit([obs("a", 2.0), obs("b", 1.0)])
    write_efficiencies(tmp_path, [f])
    back = read_efficiencies(tmp_path)["h200-141gb"]
    assert back.families == pytest.approx(dict(f.families)) and back.shared == pytest.approx(f.shared)
    (tmp_path / "efficiency.json").write_text('{"h200-141gb": {"shared": "x"}}')
    with pytest.raises(SpecError, match=r"efficiency\.json"):
        read_efficiencies(tmp_path)
