"""Eq. 7 best responses and Eq. 8 price steps on hand-built markets."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from elastico_core.bench.instances import make_cluster
from elastico_core.esp.pricing import ClusterTotals, Market, TatonnementConfig, price_step, tatonnement


@dataclass(frozen=True)
class _Options:
    """Hand-built per-option demands (the planner passes its epoch table)."""

    valid: np.ndarray
    model: np.ndarray
    mem: np.ndarray
    sm: np.ndarray
    cpu: np.ndarray
    host: np.ndarray
    dp: np.ndarray


def market_of(mem: np.ndarray, valid: np.ndarray | None = None, gpus: int = 2) -> Market:
    """One GPU model, jobs x options; memory in MiB on 40 GiB GPUs, tiny SM/CPU/host demands."""
    n, k = mem.shape
    z = np.zeros((n, k))
    totals = ClusterTotals(make_cluster(gpus), ("g",), np.array([float(gpus)]), np.array([40000.0]), 16.0, 65536.0, 2)
    ok = np.ones((n, k), dtype=bool) if valid is None else valid
    options = _Options(ok, np.zeros((n, k), dtype=np.int64), mem, z + 0.1, z + 1.0, z + 1024.0, np.ones((n, k), dtype=np.int64))
    return Market.of(totals=totals, demands=options, sm_capacity=1.0)


def test_best_response_picks_min_score_or_none() -> None:
    score = np.array([[0.5, 0.2, np.inf], [0.9, 0.8, 0.7]])
    valid = np.array([[True, True, False], [True, True, True]])
    none = np.array([1.0, 0.6])
    opts = market_of(np.ones((2, 3)), valid).options
    assert opts.best_response(opts.take(score), none).tolist() == [1, -1]


def test_price_step_projects_onto_non_negative() -> None:
    out = price_step(np.array([0.1, 0.0, 1.0]), np.array([-1.0, -0.5, 0.5]), 0.3)
    assert out.tolist() == [0.0, 0.0, 1.15]


def test_memory_price_rises_until_demand_fits() -> None:
    # four jobs, each: big (30000 MiB, value 1.0) or small (15000 MiB, value 0.8), on 2 GPUs of 40000 MiB
    mem = np.array([[30000.0, 15000.0]] * 4)
    value = np.array([[1.0, 0.8]] * 4)
    market = market_of(mem)
    w = np.ones(4)
    res = tatonnement(market, market.capacity, w[:, None] - value, value, w, np.zeros(len(market.goods)),
                      TatonnementConfig(max_iter=80))
    used = market.demand(res.choice)
    assert np.all(used <= market.capacity + 1e-9)
    assert (res.choice >= 0).sum() == 4 and set(res.choice.tolist()) == {1}  # all four shrink and start
    assert res.prices[market.good_index("mem")] > 0


@given(
    st.lists(st.lists(st.floats(1000, 39000), min_size=1, max_size=4), min_size=1, max_size=12),
    st.integers(1, 6),
    st.integers(0, 2**31 - 1),
)
def test_tatonnement_properties(mems: list[list[float]], gpus: int, seed: int) -> None:
    """Prices never negative; the returned selection is aggregate-feasible whenever one was seen."""
    width = max(len(r) for r in mems)
    mem = np.full((len(mems), width), 1e9)
    valid = np.zeros_like(mem, dtype=bool)
    for i, r in enumerate(mems):
        mem[i, : len(r)] = r
        valid[i, : len(r)] = True
    rng = np.random.default_rng(seed)
    value = np.where(valid, rng.uniform(0.1, 1.0, mem.shape), 0.0)
    market = market_of(mem, valid, gpus)
    w = np.ones(len(mems))
    res = tatonnement(market, market.capacity, w[:, None] - value, value, w, np.zeros(len(market.goods)),
                      TatonnementConfig(max_iter=30))
    assert np.all(res.prices >= 0)
    assert np.all(market.rent(res.prices)[valid] >= 0)
    if np.all(res.excess <= 1e-6):
        assert np.all(market.demand(res.choice) <= market.capacity + 1e-6)
    assert all(valid[j, k] for j, k in enumerate(res.choice) if k >= 0)
