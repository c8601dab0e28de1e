"""The 36 (+10) feature vector of §3.3.1: order, block swap, pairwise terms, NaN handling."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from elastico_core.iac.batch import PER_JOB_FEATURES, PairBatch, profile_batch
from elastico_core.iac.features import (
    FEATURE_NAMES,
    MISSING_FEATURES,
    N_FEATURES,
    PAIR_FEATURES,
    PAPER_FEATURES,
    batch_features,
    both_directions,
    pair_features,
)
from elastico_core.model.hardware import gpu_model
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.estimators import estimate

COL = {n: i for i, n in enumerate(FEATURE_NAMES)}


def job(sm: float = 0.5, occ: float = 0.4, dram: float = 0.3, fb: float = 8000.0, tc: float = 0.2, infer: float = 0.0) -> np.ndarray:
    return np.array([[sm, occ, dram, fb, tc, infer, 7.5, 100.0, 32.0, 0.0, 1.0, 0.0, 0.0, 0.0]])


def test_layout_is_the_papers_36_then_10_missingness_flags() -> None:
    assert len(PAPER_FEATURES) == 36 and N_FEATURES == 46
    assert FEATURE_NAMES[:14] == tuple(f"a_{n}" for n in PER_JOB_FEATURES)
    assert FEATURE_NAMES[14:28] == tuple(f"b_{n}" for n in PER_JOB_FEATURES)
    assert FEATURE_NAMES[28:36] == PAIR_FEATURES
    assert FEATURE_NAMES[36:] == MISSING_FEATURES
    assert PER_JOB_FEATURES[:5] == ("sm_active", "sm_occupancy", "dram_active", "fb_used_mb", "tensor_active")
    assert PER_JOB_FEATURES[5:8] == ("is_infer", "log_params", "throughput")


def test_pairwise_terms_by_hand() -> None:
    a, b = job(sm=0.8, dram=0.4, fb=30000, tc=0.5), job(sm=0.2, dram=0.3, fb=10000, tc=0.1, infer=1.0)
    x = pair_features(a, b, 80000.0)[0]
    assert x[COL["mean_sm_active"]] == pytest.approx(0.5)
    assert x[COL["mean_dram_active"]] == pytest.approx(0.35)
    assert x[COL["mean_tensor_active"]] == pytest.approx(0.3)
    assert x[COL["colo_type"]] == 1.0  # T+I
    assert x[COL["mem_pressure"]] == pytest.approx(0.5)
    assert x[COL["compute_balance"]] == pytest.approx(0.25)
    assert x[COL["mem_intensity_diff"]] == pytest.approx(abs(0.4 / 0.8 - 0.3 / 0.2))
    assert not x[36:].any()


def test_zero_sm_is_balanced_and_not_memory_bound() -> None:
    x = pair_features(job(sm=0.0, dram=0.0), job(sm=0.0, dram=0.2), 1000.0)[0]
    assert x[COL["compute_balance"]] == 1.0
    assert x[COL["mem_intensity_diff"]] == 0.0


def test_missing_counters_stay_nan_and_are_flagged() -> None:
    a = job()
    a[0, :5] = np.nan  # public data: no counters
    x = pair_features(a, job(), 16000.0)[0]
    assert np.isnan(x[:5]).all() and not np.isnan(x[5:14]).any()
    for name in PAIR_FEATURES:
        if name != "colo_type":
            assert math.isnan(x[COL[name]]), name
    assert x[COL["colo_type"]] == 0.0
    assert (x[36:41] == 1.0).all() and (x[41:46] == 0.0).all()


finite = st.floats(0.0, 1.0, allow_nan=False)
block = arrays(np.float64, (5, 14), elements=st.one_of(finite, st.just(math.nan)))


@settings(max_examples=60, deadline=None)
@given(a=block, b=block, mem=st.floats(1000.0, 200000.0))
def test_swapping_the_jobs_swaps_the_blocks_and_keeps_the_pair_terms(a: np.ndarray, b: np.ndarray, mem: float) -> None:
    ab = pair_features(a, b, mem)
    ba = pair_features(b, a, mem)
    np.testing.assert_array_equal(ab[:, :14], ba[:, 14:28])
    np.testing.assert_array_equal(ab[:, 14:28], ba[:, :14])
    np.testing.assert_allclose(ab[:, 28:36], ba[:, 28:36], equal_nan=True)
    np.testing.assert_array_equal(ab[:, 36:41], ba[:, 41:46])
    assert not np.isinf(ab).any()


def test_both_directions_stacks_a_then_b() -> None:
    a, b = job(sm=0.9), job(sm=0.1)
    x = both_directions(a, b, np.array([40960.0]))
    assert x.shape == (2, N_FEATURES)
    assert x[0, 0] == 0.9 and x[1, 0] == 0.1


def test_planner_batch_features_match_the_row_builder() -> None:
    g = gpu_model("a100-80gb")
    w1, w2 = PAPER_WORKLOADS["resnet50"], PAPER_WORKLOADS["qwen-1.7b"]
    p1 = estimate(w1, w1.defaults, g)
    p2 = estimate(w2, w2.defaults.with_(gpu_memory_utilization=0.3), g)
    assert p1 is not None and p2 is not None
    pb = profile_batch([(w1, p1), (w2, p2)])
    batch = PairBatch(pb, pb.take(np.array([1, 0])), np.full(2, float(g.memory_mib)))
    x = batch_features(batch)
    assert x.shape == (2, N_FEATURES)
    assert x[0, COL["colo_type"]] == 1.0 and x[0, COL["b_is_infer"]] == 1.0
    np.testing.assert_array_equal(x[0, :14], x[1, 14:28])


def test_wrong_block_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="per-job blocks"):
        pair_features(np.zeros((2, 13)), np.zeros((2, 13)), 1.0)
