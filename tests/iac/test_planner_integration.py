"""A learned predictor in Algorithm 1's rounds: a harmful pair is steered apart, harmless ones packed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from elastico_core.bench.instances import make_cluster
from elastico_core.iac.bench import candidate_batch
from elastico_core.iac.cf import CFRegressor
from elastico_core.iac.dataset import validate
from elastico_core.iac.evaluate import fit_model
from elastico_core.iac.learned import ExploringPredictor, LearnedPredictor
from elastico_core.iac.models import LightGBMRegressor
from elastico_core.iac.predictor import TableLookup
from elastico_core.model.job import JobSpec
from elastico_core.pds.planner import Planner, PlanningInput
from elastico_core.pds.rules import PRODUCTION, ElasticoRules, variant
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.store import ProfileStore

NAMES = ("qwen-1.7b", "deepseek-1.5b", "resnet50", "ncf", "bert")


def mixed_kinds_hurt() -> LearnedPredictor:
    """Trained on a toy table where every training+inference pair halves both jobs, others cost 1 %."""
    rows = []
    for a in NAMES:
        for b in NAMES:
            wa, wb = PAPER_WORKLOADS[a], PAPER_WORKLOADS[b]
            colo = 50.0 if wa.kind is not wb.kind else 99.0
            rows.append(
                {"gpu": "a100-80gb", "workload_a": a, "kind_a": wa.kind.value, "knobs_a": "{}", "params_a": wa.params,
                 "solo_tput_a": 100.0, "colo_tput_a": colo, "workload_b": b, "kind_b": wb.kind.value, "knobs_b": "{}",
                 "params_b": wb.params, "solo_tput_b": 100.0, "colo_tput_b": colo}
            )
    s = validate(pl.DataFrame(rows)).samples()
    return LearnedPredictor(LightGBMRegressor(n_estimators=40, min_child_samples=2).fit(s.X, s.y), name="toy")


def test_harmful_pairs_are_separated_and_harmless_ones_packed(tmp_path: Path) -> None:
    cluster = make_cluster(2, gpu="a100-80gb", per_node=2)
    w = PAPER_WORKLOADS
    jobs = (JobSpec("qwen", w["qwen-1.7b"]), JobSpec("deepseek", w["deepseek-1.5b"]), JobSpec("resnet", w["resnet50"]), JobSpec("ncf", w["ncf"]))
    plan = Planner(ProfileStore.open(tmp_path), predictor=mixed_kinds_hurt()).plan(PlanningInput(cluster, jobs))
    partners = {p.job_id: p.partners for p in plan.placements}
    assert partners == {"qwen": ("deepseek",), "deepseek": ("qwen",), "resnet": ("ncf",), "ncf": ("resnet",)}
    assert all(p.predicted_slowdown < 1.1 for p in plan.placements)
    flagged = [v for r in plan.rounds for v in r.violations]
    infer = {"qwen", "deepseek"}
    assert flagged and all((v.job_a in infer) != (v.job_b in infer) for v in flagged)  # only T+I pairs flagged
    assert all(min(v.slowdown_a, v.slowdown_b) > 1.5 for v in flagged)
    assert any(r.penalties for r in plan.rounds) and any(r.separated for r in plan.rounds)


def cf_knowing(names: tuple[str, ...], colo: float) -> LearnedPredictor:
    """A factor model that has seen only ``names``, every pair of them at ``colo`` % of solo throughput."""
    rows = []
    for a in names:
        for b in names:
            wa, wb = PAPER_WORKLOADS[a], PAPER_WORKLOADS[b]
            rows.append(
                {"gpu": "a100-80gb", "workload_a": a, "kind_a": wa.kind.value, "knobs_a": "{}", "params_a": wa.params,
                 "solo_tput_a": 100.0, "colo_tput_a": colo, "workload_b": b, "kind_b": wb.kind.value, "knobs_b": "{}",
                 "params_b": wb.params, "solo_tput_b": 100.0, "colo_tput_b": colo}
            )
    s = validate(pl.DataFrame(rows)).samples()
    return LearnedPredictor(fit_model(CFRegressor(epochs=150), s), name="cf")


def test_cold_start_exploration_colocates_what_the_model_never_saw(tmp_path: Path) -> None:
    """The model knows two workloads, which halve each other; for a pair with a workload it never saw it
    answers its training mean (2x), above any tolerance. Production explores: such a pair is planned at
    ``explore_cold`` and shares a GPU; without exploration nothing is co-located (so nothing is measured or
    learned); the known harmful pair stays apart either way."""
    cluster = make_cluster(3, gpu="a100-80gb", per_node=3)
    w = PAPER_WORKLOADS
    predictor = cf_knowing(("qwen-1.7b", "deepseek-1.5b"), 50.0)
    unseen = (JobSpec("resnet", w["resnet50"]), JobSpec("ncf", w["ncf"]))
    known = (JobSpec("qwen", w["qwen-1.7b"]), JobSpec("deepseek", w["deepseek-1.5b"]))

    def partners(rules: ElasticoRules) -> dict[str, tuple[str, ...]]:
        planner = Planner(ProfileStore.open(tmp_path), predictor=rules.iac_view(predictor), config=rules.planner)
        plan = planner.plan(PlanningInput(rules.planning_cluster(cluster), (*known, *unseen)))
        return {p.job_id: p.partners for p in plan.placements}

    assert PRODUCTION.explore_cold is not None
    explored = partners(PRODUCTION)  # four jobs on three GPUs: one pair, which the model never measured
    assert len(explored) == 4 and sum(map(len, explored.values())) == 2
    assert all(j in ("resnet", "ncf") or all(p in ("resnet", "ncf") for p in ps) for j, ps in explored.items() if ps)
    assert "deepseek" not in explored["qwen"]  # the model's own answer for them: 2x, kept apart
    cold = partners(variant("no-explore"))  # every pair 2x: nobody shares, one job waits
    assert len(cold) == 3 and not any(cold.values())
    view = PRODUCTION.iac_view(predictor)
    assert isinstance(view, ExploringPredictor) and view.name == "cf+explore1.2"
    with pytest.raises(ValueError, match="finite value >= 1"):
        predictor.exploring(0.5)


def test_exploration_composes_with_the_bound_and_leaves_other_predictors_alone() -> None:
    predictor = cf_knowing(("qwen-1.7b", "deepseek-1.5b"), 50.0)
    batch = candidate_batch(64)
    cold = predictor.cold(batch)
    assert cold is not None and cold.any() and not cold.all()
    s, same_cold = predictor.predict_with_cold(batch)  # one pass: the same answers as the two calls
    np.testing.assert_array_equal(s, predictor.predict(batch))
    assert same_cold is not None and (same_cold == cold).all()
    np.testing.assert_array_equal(PRODUCTION.iac_view(predictor).predict(batch), np.where(cold, 1.2, s))
    out = replace(PRODUCTION, iac_bound=0.9).iac_view(predictor).predict(batch)
    np.testing.assert_array_equal(out[cold], 1.2)
    np.testing.assert_array_equal(out[~cold], predictor.upper(0.9).predict(batch)[~cold])
    table = TableLookup(default=1.7)
    assert PRODUCTION.iac_view(table) is table  # a lookup has no cold starts to explore
    assert LearnedPredictor(LightGBMRegressor(n_estimators=5).fit(*_xy(batch))).exploring(1.2).name == "learned"


def _xy(batch):  # type: ignore[no-untyped-def]
    from elastico_core.iac.features import batch_features

    X = batch_features(batch)
    return X, np.full(len(X), 1.5)
