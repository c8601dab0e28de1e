"""The interleaved pair protocol's statistics (pure), and a suspect pair."""

from __future__ import annotations

import math

import pytest

from elastico_core.profiling.windows import SUSPECT_BELOW, PairFigures, SideFigures


def test_slowdowns_are_per_repeat_medians_with_their_spread() -> None:
    side = SideFigures(solo=(100.0, 110.0, 90.0), colo=(50.0, 50.0, 60.0))
    assert side.slowdowns == pytest.approx((2.0, 2.2, 1.5))
    assert side.slowdown == pytest.approx(2.0) and side.slowdown_min == pytest.approx(1.5)
    assert side.slowdown_max == pytest.approx(2.2) and side.repeats == 3
    assert side.solo_tput == pytest.approx(100.0) and side.colo_tput == pytest.approx(50.0)


def test_a_repeat_without_a_complete_iteration_is_left_out() -> None:
    side = SideFigures(solo=(100.0, math.nan, 90.0), colo=(50.0, 40.0, 0.0))
    assert side.repeats == 1 and side.slowdown == pytest.approx(2.0)
    empty = SideFigures(solo=(math.nan,), colo=(1.0,))
    assert empty.repeats == 0 and math.isnan(empty.slowdown)


def test_a_pair_faster_together_than_apart_is_suspect() -> None:
    fine = SideFigures((100.0,) * 3, (80.0,) * 3)
    faster = SideFigures((100.0,) * 3, (100.0 / (SUSPECT_BELOW - 0.02),) * 3)
    assert not PairFigures(fine, fine, ()).suspect
    assert PairFigures(fine, faster, ()).suspect
    assert PairFigures(fine, SideFigures((math.nan,), (1.0,)), ()).suspect  # nothing measured: never a label
