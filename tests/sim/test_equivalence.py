"""Skipping unchanged epochs is exact for event-driven policies (the simulator's module doc claims it)."""

from __future__ import annotations

import numpy as np
import pytest

from elastico_core.bench.instances import make_cluster
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.policy import PolicyContext, PolicyKind
from elastico_core.sim.registry import default_registry
from elastico_core.sim.simulator import SimConfig, simulate
from elastico_core.sim.truth import ContentionPredictor, table6_predictor
from tests.sim.sim_helpers import make_trace

ROWS = [
    (f"j{i:02d}", 13 * i + (i % 4) * 3, 120 + 71 * (i % 7), 2 if i % 5 == 1 and i % 4 != 3 else 1, "infer" if i % 4 == 3 else "train")
    for i in range(18)
]


@pytest.mark.parametrize("kind", [PolicyKind.VOLCANO, PolicyKind.LUCID, PolicyKind.GREEDY])
@pytest.mark.parametrize("predictor", ["contention", "table6"])
def test_event_driven_epochs_equal_every_epoch(store: ProfileStore, kind: PolicyKind, predictor: str) -> None:
    trace = make_trace(ROWS, seed=1)
    pred = ContentionPredictor() if predictor == "contention" else table6_predictor()
    out = []
    for every in (False, True):
        pol = default_registry().get(kind)(PolicyContext(store, pred, 1))
        out.append(simulate(trace, pol, make_cluster(4), 1, store=store, config=SimConfig(every_epoch=every)))
    lazy, eager = out
    assert lazy.jobs == eager.jobs
    for name in ("t", "sm", "mem", "busy", "rate"):
        assert np.array_equal(getattr(lazy.series, name), getattr(eager.series, name))
    assert len(lazy.decide_ms) < len(eager.decide_ms) / 3  # and it asks the policy far less often


def test_elastico_with_re_plans_while_jobs_wait_matches_every_epoch(store: ProfileStore) -> None:
    """The Planner is not idempotent (warm-started prices, Eq. 12's queue): it is re-planned every ΔT while
    jobs wait; skipping only the ticks at which nothing waits and nothing changed keeps its JCTs."""
    trace = make_trace(ROWS, seed=1)
    jct = []
    for every in (False, True):
        pol = default_registry().get(PolicyKind.ELASTICO)(PolicyContext(store, ContentionPredictor(), 1))
        r = simulate(trace, pol, make_cluster(4), 1, store=store, config=SimConfig(every_epoch=every))
        jct.append(np.mean([j.jct_s for j in r.jobs]))
    assert abs(jct[0] - jct[1]) <= 0.01 * jct[1]
