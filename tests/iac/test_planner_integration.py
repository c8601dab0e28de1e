"""A learned predictor in Algorithm 1's rounds: a harmful pair is steered apart, harmless ones packed."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from elastico_core.bench.instances import make_cluster
from elastico_core.iac.dataset import validate
from elastico_core.iac.learned import LearnedPredictor
from elastico_core.iac.models import LightGBMRegressor
from elastico_core.model.job import JobSpec
from elastico_core.pds.planner import Planner, PlanningInput
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
