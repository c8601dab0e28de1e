"""The baselines' board starts every decision as the snapshot's occupancy, though it is kept across
decisions (only the jobs that started, finished or moved are applied, and each decision's own
placements are undone before the next)."""

from __future__ import annotations

import pytest

from elastico_core.bench.instances import make_cluster
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.policies import common
from elastico_core.sim.policies.greedy import GreedyPolicy
from elastico_core.sim.policies.lucid import LucidPolicy
from elastico_core.sim.policies.volcano import VolcanoPolicy
from elastico_core.sim.policy import ClusterSnapshot
from elastico_core.sim.simulator import simulate
from elastico_core.sim.truth import ContentionPredictor, table6_predictor
from tests.sim.sim_helpers import make_trace

ROWS = [
    ("a", 0, 600, 1, "train", "dcgan"), ("b", 1, 300, 1, "train", "pointnet"), ("c", 2, 400, 2, "train", "resnet50"),
    ("d", 3, 200, 1, "infer", "qwen-1.7b"), ("e", 40, 500, 4, "train", "bert"), ("f", 50, 100, 1, "train", "lstm"),
    ("g", 60, 300, 2, "train", "ncf"), ("h", 400, 200, 1, "train", "ppo"), ("i", 700, 300, 3, "train", "dcgan"),
]


@pytest.mark.parametrize("make", [VolcanoPolicy, lambda: LucidPolicy(table6_predictor()), lambda: GreedyPolicy(ContentionPredictor())])
def test_the_board_is_the_snapshot_at_every_decision(store: ProfileStore, make, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    seen: list[int] = []
    original = common.Boards.of

    def checked(self: common.Boards, snapshot: ClusterSnapshot) -> common.Seats:
        seats = original(self, snapshot)
        on_board = [sorted(seats.views[i].id for i in occ) for occ in seats.board.occ]
        assert on_board == [sorted(ids) for ids in snapshot.gpu_jobs]
        assert {seats.views[i].id for i in seats.board.where} == {j.id for j in snapshot.placed()}
        seats.board.check()
        seen.append(len(seats.board.where))
        return seats

    monkeypatch.setattr(common.Boards, "of", checked)
    r = simulate(make_trace(ROWS), make(), make_cluster(4, per_node=2), 0, store=store)
    assert all(j.finished for j in r.jobs) and max(seen) >= 2
