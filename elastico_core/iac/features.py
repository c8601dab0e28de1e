"""The pairwise feature vector of §3.3.1, built for a whole batch of candidate pairs at once.

Layout (``FEATURE_NAMES``, 46 columns, schema ``FEATURE_SCHEMA``):

* columns 0-13, ``a_*``: the 14 per-job features of the job whose slowdown is predicted, in the order
  of ``PER_JOB_FEATURES`` (5 hardware counters, train/infer flag, log10 parameter count, isolated
  throughput, micro-batch, checkpointing, AMP, ISL, OSL, prefix-caching ratio);
* columns 14-27, ``b_*``: the same 14 for its partner;
* columns 28-35: the 8 pairwise features, ``PAIR_FEATURES``:
  the means over both jobs of the four utilisation counters (SM active, SM occupancy, DRAM active,
  tensor active; framebuffer enters through memory pressure instead), the co-location type (number of
  inference jobs in the pair: 0 = T+T, 1 = T+I, 2 = I+I), memory pressure (fb_a + fb_b) / GPU memory,
  compute balance min(sm_a, sm_b) / max(sm_a, sm_b) (1 when both are 0), and memory-intensity
  difference |dram_a / sm_a - dram_b / sm_b| (a ratio with sm <= 1e-6 counts as 0);
* columns 36-45, appended beyond the paper's 36: ``missing_a_<counter>`` then ``missing_b_<counter>``,
  1.0 where that hardware counter of that job is unknown (NaN), else 0.0, for the five counters in
  their order. Public co-location data rarely has counters; the flags let a model tell "unknown"
  from "imputed to the median".

Features are left NaN where an input is unknown (a pairwise feature is NaN when one of its inputs is);
the models impute them (``models.Preprocessor``). Swapping the two per-job blocks gives the sample of
the other job of the pair: the pairwise block is symmetric, so only the first 28 columns move.
"""

from __future__ import annotations

import hashlib

import numpy as np

from elastico_core.iac.batch import PER_JOB_FEATURES, PairBatch

COUNTERS: tuple[str, ...] = PER_JOB_FEATURES[:5]
UTILISATION: tuple[str, ...] = ("sm_active", "sm_occupancy", "dram_active", "tensor_active")
PAIR_FEATURES: tuple[str, ...] = (
    "mean_sm_active",
    "mean_sm_occupancy",
    "mean_dram_active",
    "mean_tensor_active",
    "colo_type",
    "mem_pressure",
    "compute_balance",
    "mem_intensity_diff",
)
PAPER_FEATURES: tuple[str, ...] = (
    *(f"a_{n}" for n in PER_JOB_FEATURES),
    *(f"b_{n}" for n in PER_JOB_FEATURES),
    *PAIR_FEATURES,
)
MISSING_FEATURES: tuple[str, ...] = (
    *(f"missing_a_{n}" for n in COUNTERS),
    *(f"missing_b_{n}" for n in COUNTERS),
)
FEATURE_NAMES: tuple[str, ...] = (*PAPER_FEATURES, *MISSING_FEATURES)
N_PER_JOB = len(PER_JOB_FEATURES)
N_FEATURES = len(FEATURE_NAMES)
FEATURE_SCHEMA = "iac-v1-" + hashlib.sha256(",".join(FEATURE_NAMES).encode()).hexdigest()[:12]

MIN_SM = 1e-6  # below this a job uses no SM worth a ratio
_COL = {name: i for i, name in enumerate(PER_JOB_FEATURES)}
_SM, _OCC, _DRAM, _FB, _TC = (_COL[n] for n in COUNTERS)
_INFER = _COL["is_infer"]

assert len(PAPER_FEATURES) == 36, "the paper's vector has 36 dimensions"


def pair_features(a: np.ndarray, b: np.ndarray, gpu_mem_mib: np.ndarray | float) -> np.ndarray:
    """X for every row i: job ``a[i]`` (predicted) co-located with ``b[i]`` on a GPU of ``gpu_mem_mib``.

    ``a`` and ``b`` are (N, 14) arrays in ``PER_JOB_FEATURES`` order; NaN marks an unknown value.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != N_PER_JOB or b.shape != a.shape:
        raise ValueError(f"per-job blocks must both be (N, {N_PER_JOB}), got {a.shape} and {b.shape}")
    n = a.shape[0]
    out = np.empty((n, N_FEATURES), dtype=np.float64)
    out[:, :N_PER_JOB] = a
    out[:, N_PER_JOB : 2 * N_PER_JOB] = b
    p = 2 * N_PER_JOB
    for i, name in enumerate(UTILISATION):
        c = _COL[name]
        out[:, p + i] = 0.5 * (a[:, c] + b[:, c])
    out[:, p + 4] = a[:, _INFER] + b[:, _INFER]
    mem = np.broadcast_to(np.asarray(gpu_mem_mib, dtype=np.float64), (n,))
    with np.errstate(divide="ignore", invalid="ignore"):
        out[:, p + 5] = (a[:, _FB] + b[:, _FB]) / np.where(mem > 0, mem, np.nan)
        lo = np.minimum(a[:, _SM], b[:, _SM])
        hi = np.maximum(a[:, _SM], b[:, _SM])
        out[:, p + 6] = np.where(hi > 0, lo / np.where(hi > 0, hi, 1.0), np.where(np.isnan(hi), np.nan, 1.0))
        out[:, p + 7] = np.abs(_intensity(a) - _intensity(b))
    m = 36
    out[:, m : m + 5] = np.isnan(a[:, :5])
    out[:, m + 5 : m + 10] = np.isnan(b[:, :5])
    return out


def _intensity(x: np.ndarray) -> np.ndarray:
    """DRAM-active per SM-active: how memory-bound a job is (0 where it uses no SM at all)."""
    sm, dram = x[:, _SM], x[:, _DRAM]
    busy = sm > MIN_SM
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = dram / np.where(busy, sm, 1.0)
    return np.where(busy, ratio, np.where(np.isnan(sm) | np.isnan(dram), np.nan, 0.0))


def batch_features(batch: PairBatch) -> np.ndarray:
    """X for a planner batch: row i is the slowdown of ``batch.a[i]`` given ``batch.b[i]``."""
    return pair_features(batch.a.values, batch.b.values, batch.gpu_mem_mib)


def both_directions(a: np.ndarray, b: np.ndarray, gpu_mem_mib: np.ndarray) -> np.ndarray:
    """The two samples of each measured pair: rows 0..N-1 predict ``a``, rows N..2N-1 predict ``b``."""
    mem = np.asarray(gpu_mem_mib, dtype=np.float64)
    return np.vstack([pair_features(a, b, mem), pair_features(b, a, mem)])
