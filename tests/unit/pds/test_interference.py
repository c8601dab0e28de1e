"""The pair memo returns exactly what the predictor would, asks it only about new pairs, and forgets
everything when the predictor changes; tolerances match Eq. 11 cell by cell."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from elastico_core.bench.instances import make_cluster, random_jobs
from elastico_core.iac.batch import PairBatch
from elastico_core.iac.predictor import TableLookup
from elastico_core.iac.thresholds import ThresholdConfig, adaptive_tau
from elastico_core.pds.interference import PairMemo, Tolerances, pair_batch
from elastico_core.pds.planner import Planner, PlanningInput
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.truth import ContentionPredictor


@dataclass
class Counting:
    """A real predictor that records how many rows it was asked about."""

    inner: ContentionPredictor = field(default_factory=ContentionPredictor)
    asked: list[int] = field(default_factory=list)
    name: str = "counting"

    def predict(self, batch: PairBatch) -> np.ndarray:
        self.asked.append(len(batch))
        return self.inner.predict(batch)


def _table(store: ProfileStore):  # type: ignore[no-untyped-def]
    cluster = make_cluster(8)
    jobs = random_jobs(12, seed=3)
    prep = Planner(store).prepare(PlanningInput(cluster, jobs))
    return prep.table, prep.specs


def _rows(table) -> list[tuple[int, int, int, int]]:  # type: ignore[no-untyped-def]
    n = len(table.sets)
    return [(a, 0, b, len(table.sets[b]) - 1) for a in range(n) for b in range(n) if a != b]


def test_memo_equals_the_predictor_and_asks_once(store: ProfileStore) -> None:
    table, _ = _table(store)
    rows = _rows(table)
    mem = [40960.0] * len(rows)
    counting = Counting()
    memo = PairMemo(counting)
    direct = ContentionPredictor().predict(pair_batch(rows, table, mem))
    first = memo.slowdowns(table, rows, mem)
    again = memo.slowdowns(table, rows[::-1], mem)
    np.testing.assert_allclose(first, direct, rtol=0, atol=1e-12)
    np.testing.assert_allclose(again, direct[::-1], rtol=0, atol=1e-12)
    assert counting.asked == [len(rows)]  # the second call was served from memory
    assert memo.hits == len(rows) and memo.misses == len(rows)


def test_memo_keys_on_gpu_memory_and_bounds_its_size(store: ProfileStore) -> None:
    table, _ = _table(store)
    rows = _rows(table)[:10]
    counting = Counting()
    memo = PairMemo(counting, limit=15)
    memo.slowdowns(table, rows, [40960.0] * 10)
    memo.slowdowns(table, rows, [81920.0] * 10)  # another GPU model: new pairs, and over the limit
    assert counting.asked == [10, 10] and len(memo) == 10


def test_planner_memo_follows_its_predictor(store: ProfileStore) -> None:
    cluster = make_cluster(4)
    jobs = random_jobs(10, seed=1)
    planner = Planner(store, Counting())
    planner.plan(PlanningInput(cluster, jobs))
    before = planner._memo()
    planner.predictor = TableLookup(default=3.0)  # a pathological predictor: no pair may share
    plan = planner.plan(PlanningInput(cluster, jobs))
    assert planner._memo() is not before
    assert all(not p.partners for p in plan.placements)


def test_tolerances_are_eq_11_per_cell(store: ProfileStore) -> None:
    table, specs = _table(store)
    cfg = ThresholdConfig()
    cells = [(j, k) for j in range(len(table.sets)) for k in range(len(table.sets[j]))]
    got = Tolerances(table, specs, 0.9, cfg).of(cells + cells[:3])
    tput = np.array([table.sets[j].throughput[k] for j, k in cells])
    floors = np.array([specs[j].floor for j, _ in cells])
    want = adaptive_tau(tput, floors, 0.9, cfg)
    np.testing.assert_array_equal(got[: len(cells)], want)
    np.testing.assert_array_equal(got[len(cells):], want[:3])
    jobs, options = (np.array(x) for x in zip(*cells, strict=True))
    np.testing.assert_array_equal(Tolerances(table, specs, 0.9, cfg).matrix[jobs, options], want)


def test_an_unchanged_input_gets_the_same_plan_without_replanning(store: ProfileStore) -> None:
    cluster = make_cluster(4)
    inp = PlanningInput(cluster, random_jobs(10, seed=2))
    planner = Planner(store, ContentionPredictor())
    first = planner.plan(inp)
    assert "unchanged" not in planner.last_timing_ms
    again = planner.plan(PlanningInput(cluster, inp.jobs))  # equal, not identical
    assert again is first and "unchanged" in planner.last_timing_ms
    fresh = Planner(store, ContentionPredictor()).plan(inp)
    assert fresh == first  # what the memo returned is what planning would return
    moved_on = planner.plan(PlanningInput(cluster, inp.jobs, prices=first.prices))
    assert moved_on is not first and "unchanged" not in planner.last_timing_ms


def test_memo_by_profile_equals_the_predictor_and_asks_once(store: ProfileStore) -> None:
    """The baselines ask by (workload, profile): the same values, each pair predicted once."""
    from elastico_core.iac.batch import profile_batch
    from elastico_core.rst.catalog import PAPER_WORKLOADS

    gpu = make_cluster(1).gpus[0].model
    pairs = [(w, p) for w in list(PAPER_WORKLOADS.values())[:4] if (p := store.lookup(w, w.defaults, gpu)) is not None]
    counting = Counting()
    memo = PairMemo(counting)
    for _ in range(2):
        for wa, pa in pairs:
            for wb, pb in pairs:
                batch = PairBatch(profile_batch([(wa, pa)]), profile_batch([(wb, pb)]), np.array([40960.0]))
                direct = ContentionPredictor().predict(batch)
                assert memo.slowdown(wa, pa, wb, pb, 40960.0) == float(direct[0])
    assert len(pairs) == 4 and len(counting.asked) == 16 and memo.hits == 16
