"""Adaptive tolerance thresholds (Eq. 11): tau_base <= T/L, the clamp tau <= tau_base + beta_max."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastico_core.iac.thresholds import ThresholdConfig, adaptive_tau

CFG = ThresholdConfig(tau_default=1.25, beta=0.25, beta_max=0.25, u_target=0.8)
pos = st.floats(0.01, 1e6, allow_nan=False)


@given(t=pos, floor=st.floats(0.0, 1e6), u=st.floats(0.0, 5.0), beta=st.floats(0.0, 2.0), beta_max=st.floats(0.0, 1.0))
def test_tau_respects_the_floor_and_the_clamp(t: float, floor: float, u: float, beta: float, beta_max: float) -> None:
    cfg = ThresholdConfig(tau_default=1.25, beta=beta, beta_max=beta_max, u_target=0.8)
    tau = float(adaptive_tau(np.array([t]), np.array([floor]), u, cfg)[0])
    ratio = t / floor if floor > 0 else np.inf
    base = min(cfg.tau_default, ratio)
    assert tau >= 1.0
    assert tau <= max(1.0, base + beta_max) + 1e-12  # the clamp of Eq. 11 (1.0: no slowdown at all)
    if ratio >= 1.0:
        assert tau <= ratio + 1e-12  # an admitted slowdown never breaks the floor (Eq. 4)


@given(t=pos, floor=pos, lo=st.floats(0.0, 3.0), hi=st.floats(0.0, 3.0))
def test_more_pressure_never_lowers_tau(t: float, floor: float, lo: float, hi: float) -> None:
    lo, hi = sorted((lo, hi))
    a = adaptive_tau(np.array([t]), np.array([floor]), lo, CFG)[0]
    b = adaptive_tau(np.array([t]), np.array([floor]), hi, CFG)[0]
    assert b >= a - 1e-12


@pytest.mark.parametrize(
    ("t", "floor", "u", "want"),
    [
        (100.0, 0.0, 0.8, 1.25),  # no floor, at target: tau_default
        (100.0, 0.0, 1.6, 1.5),  # far above target: + beta_max
        (100.0, 0.0, 0.0, 1.0),  # idle cluster: tau_default - beta_max
        (100.0, 90.0, 1.6, 100.0 / 90.0),  # the floor caps it
        (100.0, 120.0, 1.6, 1.0),  # floor above throughput: no slowdown tolerated
    ],
    ids=["no-floor", "pressure", "idle", "floor-caps", "floor-unreachable"],
)
def test_examples(t: float, floor: float, u: float, want: float) -> None:
    assert adaptive_tau(np.array([t]), np.array([floor]), u, CFG)[0] == pytest.approx(want)
