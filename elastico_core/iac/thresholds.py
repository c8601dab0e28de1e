"""Adaptive tolerance thresholds (Eq. 11): tolerate a little more interference under pressure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class ThresholdConfig:
    tau_default: float = 1.5  # slowdown tolerated by a job without a floor (decay >= 0.67; pds/rules.py says why)
    beta: float = 0.25  # sensitivity to cluster pressure
    beta_max: float = 0.25  # hard cap on the pressure term
    u_target: float = 0.8  # utilisation the cluster aims at


def adaptive_tau(
    throughput: np.ndarray, floor: np.ndarray, utilization: float, cfg: ThresholdConfig
) -> np.ndarray:
    """tau_j(t) = tau_base_j + beta (U/U_target - 1), clamped to tau_base_j + beta_max.

    ``tau_base_j = min(tau_default, T_j(c*)/L_j)`` so an admitted slowdown never breaks the floor, and
    the pressure term is clamped to [-beta_max, beta_max]; the result never exceeds T/L (Eq. 4 is
    hard) and is never below 1.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(floor > 0, throughput / np.where(floor > 0, floor, 1.0), np.inf)
    base = np.minimum(cfg.tau_default, ratio)
    pressure = float(np.clip(cfg.beta * (utilization / cfg.u_target - 1.0), -cfg.beta_max, cfg.beta_max))
    tau = np.minimum(base + pressure, ratio)
    return np.maximum(tau, 1.0)
