"""Under ``split-few`` a few flagged pairs are split where they stand, not re-planned (``PlannerConfig.split_share``);
the split's incremental re-assessment answers as a full one would."""

from __future__ import annotations

import numpy as np
import pytest

from elastico_core.bench import planner_bench
from elastico_core.model.plan import Plan
from elastico_core.model.planning import PlanningInput
from elastico_core.pds import epoch
from elastico_core.pds.planner import Planner
from elastico_core.pds.rules import PRODUCTION, VARIANTS, ElasticoRules
from tests.conftest import REPO


def _epochs(monkeypatch: pytest.MonkeyPatch, rules: ElasticoRules) -> list[tuple[int, int, int]]:
    """Per epoch of a contended benchmark (jobs end and arrive): rounds, the jobs the first round flagged,
    the jobs it placed."""
    out: list[tuple[int, int, int]] = []
    inner = Planner.plan

    def plan(self: Planner, inp: PlanningInput) -> Plan:
        got = inner(self, inp)
        if got.rounds:
            first = got.rounds[0]
            out.append((len(got.rounds), len({j for v in first.violations for j in (v.job_a, v.job_b)}), first.placed))
            assert not got.rounds[-1].violations or got.notes  # what is left after the last round is split
        return got

    with monkeypatch.context() as m:
        m.setattr(Planner, "plan", plan)
        planner_bench.bench_planner(800, 256, seed=1, epochs=6, rules=rules, profiles=REPO / "profiles")
    return out


def test_a_few_flagged_pairs_are_split_and_many_get_another_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """``split-few``: one round whenever the first flags at most 1 % of the placed jobs, more otherwise;
    production, on the same instance, buys another round for the same flags."""
    few = VARIANTS["split-few"]
    assert few.planner.split_share == 0.01 and PRODUCTION.planner.split_share is None
    seen = _epochs(monkeypatch, few)
    assert any(0 < flagged <= 0.01 * placed for _, flagged, placed in seen), "a few flags must occur, or this shows nothing"
    for rounds, flagged, placed in seen:
        assert rounds == 1 if flagged <= 0.01 * placed else rounds >= 2
    production = _epochs(monkeypatch, PRODUCTION)
    assert all(rounds >= 2 for rounds, flagged, _ in production if flagged)
    assert sum(r for r, _, _ in production) > sum(r for r, _, _ in seen)


@pytest.mark.parametrize("rules", ["one-round", "split-few"])  # the split production runs after its last round, more often
def test_the_split_reassesses_as_a_full_assessment_would(monkeypatch: pytest.MonkeyPatch, rules: str) -> None:
    """After every sweep of a split, the slowdowns of the placed jobs and the violations left are those of a
    full assessment of the board (the split re-assesses only the GPUs its moves touched)."""
    calls: list[int] = []
    inner = epoch.reassess

    def checked(ep: epoch.Epoch, rnd: epoch.Round, touched: set[int]) -> list[epoch.PairViolation]:
        got = inner(ep, rnd, touched)
        full, violations = epoch.assess(ep, rnd.board)
        placed = np.fromiter(rnd.board.where, dtype=np.int64)
        np.testing.assert_allclose(rnd.slowdown[placed], full[placed])
        assert got == violations
        calls.append(len(touched))
        return got

    monkeypatch.setattr(epoch, "reassess", checked)
    chosen: ElasticoRules = VARIANTS[rules]
    planner_bench.bench_planner(800, 256, seed=1, epochs=6, rules=chosen, profiles=REPO / "profiles")
    assert sum(1 for n in calls if n) >= 3, "the split must have moved jobs, or this test shows nothing"
