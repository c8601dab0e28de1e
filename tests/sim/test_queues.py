"""Queues in the simulator: the trace's queue column, Philly's quota rule, the guarantee-violation and Jain
figures, Volcano's proportion, and a small shared cluster where only reclaim keeps the guarantee."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from elastico_core.bench.instances import make_cluster
from elastico_core.model.errors import SpecError
from elastico_core.model.queues import Amount, QueueSet, QueueSpec
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.policies.quota import deserved
from elastico_core.sim.policy import PolicyContext, PolicyKind
from elastico_core.sim.profiles import ProfileBook
from elastico_core.sim.queues import QueueTrace, philly_queues, queue_metrics
from elastico_core.sim.registry import default_registry
from elastico_core.sim.simulator import simulate
from elastico_core.sim.trace import build_jobs, load_trace, parse_rows, write_trace
from elastico_core.sim.truth import ContentionPredictor, NoInterferenceTruth
from tests.sim.sim_helpers import COLUMNS

USABLE_GIB = (40960 - 512) / 1024


def _trace_with_queues(rows: list[tuple[object, ...]]) -> object:
    cols = [*COLUMNS, "queue"]
    return parse_rows([{c: str(v) for c, v in zip(cols, r, strict=False)} for r in rows], cols, "q.csv", 0)


def test_the_trace_names_each_jobs_queue(tmp_path: Path) -> None:
    tr = _trace_with_queues([("j1", 0, 60, 1, "train", "resnet50", "u", "team-a"), ("j2", 5, 60, 1, "train", "", "u", "")])
    assert [j.queue for j in tr.jobs] == ["team-a", "default"]  # type: ignore[attr-defined]
    again = load_trace(write_trace(tr, tmp_path / "t.csv"))  # type: ignore[arg-type]
    assert [j.queue for j in again.jobs] == ["team-a", "default"]
    with pytest.raises(SpecError, match="line 2 \\(job 'j1'\\): queue: 'Team A' is not a DNS label"):
        _trace_with_queues([("j1", 0, 60, 1, "train", "resnet50", "u", "Team A")])


def test_a_cluster_with_queues_refuses_a_job_of_another(store: ProfileStore) -> None:
    cluster = replace(make_cluster(4), queues=QueueSet((QueueSpec("team-a", (("a100-40gb", Amount(4, 4 * USABLE_GIB)),)),)))
    tr = _trace_with_queues([("j1", 0, 60, 1, "train", "resnet50", "u", "team-b")])
    with pytest.raises(SpecError, match="queue 'team-b' is not a queue of the cluster \\(queues: team-a\\)"):
        build_jobs(tr, cluster, ProfileBook.for_cluster(store, cluster))  # type: ignore[arg-type]


def test_philly_rule_quotas_follow_gpu_hours() -> None:
    qs = philly_queues({"vc-a": 30.0, "vc-b": 10.0, "vc-c": 0.04}, 8, "a100-40gb", USABLE_GIB)
    nominal = {q.name: q.nominal_of("a100-40gb").gpus for q in qs.queues}
    assert nominal == {"vc-a": 6.0, "vc-b": 2.0, "vc-c": 0.0} and sum(nominal.values()) == 8
    assert {q.cohort for q in qs.queues} == {"philly"} and {q.weight for q in qs.queues} == {1.0}
    assert qs.get("vc-a").nominal_of("a100-40gb").memory_gib == pytest.approx(6 * USABLE_GIB)  # type: ignore[union-attr]


def test_violation_counts_the_deficit_past_the_deadline_only() -> None:
    # queue 0: nominal 2, holds 1, asks 1 more from t=0 to t=100 (owed), then gets it; queue 1 idle
    t = np.array([0.0, 100.0])
    tr = QueueTrace(("a", "b"), np.array([2.0, 2.0]), t, np.array([[1.0, 0.0], [2.0, 0.0]]),
                    np.array([[1.0, 0.0], [0.0, 0.0]]), np.array([[True, False], [False, False]]), 20.0)
    m = queue_metrics(tr, 0.0, 200.0)
    assert m.violation_gpu_h == pytest.approx(1.0 * 80.0 / 3600.0)  # deficit 1 GPU for 100 - 20 s
    assert m.queues[0].share == pytest.approx((100 * 1 + 100 * 2) / (200 * 2))
    assert math.isnan(m.queues[1].share) and m.jain == pytest.approx(1.0)  # one queue with demand


def test_volcano_proportion_deserves_guarantee_then_weight() -> None:
    nominal, cap = np.array([2.0, 2.0, 0.0]), np.array([8.0, 3.0, 8.0])
    d = deserved(nominal, cap, np.array([10.0, 10.0, 10.0]), np.array([1.0, 1.0, 2.0]), 8.0)
    assert d.tolist() == pytest.approx([3.0, 3.0, 2.0])  # the guarantees, then the other 4 GPUs 1:1:2
    capped = deserved(nominal, np.array([8.0, 2.5, 8.0]), np.array([10.0, 10.0, 10.0]), np.array([1.0, 1.0, 2.0]), 8.0)
    assert capped[1] == pytest.approx(2.5) and capped.sum() == pytest.approx(8.0)  # capability caps, the rest re-dealt
    idle = deserved(nominal, cap, np.array([1.0, 0.0, 10.0]), np.array([1.0, 1.0, 1.0]), 8.0)
    assert idle[0] == pytest.approx(1.0) and idle[1] == 0.0 and idle[2] == pytest.approx(7.0)  # capped by request


SHARED = [  # team-a fills the cluster; team-b's two jobs arrive at 10 min, within its nominal quota
    *((f"a{i}", 0, 4 * 3600, 1, "train", "resnet50", "", "team-a") for i in range(8)),
    *((f"b{i}", 600, 1800, 1, "train", "bert", "", "team-b") for i in range(2)),
]


@pytest.mark.parametrize("kind", [PolicyKind.ELASTICO, PolicyKind.LUCID, PolicyKind.VOLCANO])
def test_only_reclaim_keeps_the_guarantee(kind: PolicyKind, store: ProfileStore) -> None:
    """Team A borrows team B's idle quota; B submits. ElastiCo gives it back within the deadline (no
    guarantee violation); Lucid-like, admitting by quota without reclaim, leaves B waiting for A's jobs."""
    queues = QueueSet((QueueSpec("team-a", (("a100-40gb", Amount(2, 2 * USABLE_GIB)),), cohort="org"),
                       QueueSpec("team-b", (("a100-40gb", Amount(2, 2 * USABLE_GIB)),), cohort="org")), 2)
    cluster = replace(make_cluster(4), queues=queues)
    policy = default_registry().get(kind)(PolicyContext(store, ContentionPredictor(), 0))
    r = simulate(_trace_with_queues(SHARED), policy, cluster, 0, store=store, truth=NoInterferenceTruth())  # type: ignore[arg-type]
    assert r.queues is not None
    m = queue_metrics(r.queues, 0.0, r.end_s)
    b_start = min(j.first_start_s for j in r.jobs if j.job_id.startswith("b"))
    if kind is PolicyKind.LUCID:
        assert m.violation_gpu_h > 0.1 and b_start > 3600
    else:
        assert m.violation_gpu_h == 0.0 and b_start <= 600 + (2 + 1) * 5.0 + 1e-6  # the deadline: 2 epochs, and a tick
        assert sum(j.preemptions for j in r.jobs if j.job_id.startswith("a")) >= 1 or kind is PolicyKind.ELASTICO
    assert all(j.finished for j in r.jobs)  # nothing lost
