"""The simulated day that learns its interference model from the runtime pairs it measures."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from elastico_core.iac.batch import PairBatch, profile_batch
from elastico_core.iac.cf import CFRegressor, PairKeys
from elastico_core.iac.dataset import validate
from elastico_core.iac.evaluate import fit_model
from elastico_core.iac.features import batch_features
from elastico_core.iac.learned import LearnedPredictor
from elastico_core.iac.models import ModelKind
from elastico_core.pds.rules import PRODUCTION, variant
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.learning import (
    LearnConfig,
    Learner,
    compare_learning,
    prediction_error,
    run_learning,
    runtime_dataset,
)
from elastico_core.sim.paper_mix import PaperMixConfig, paper_mix
from elastico_core.sim.policies.elastico import ElasticoPolicy
from elastico_core.sim.policy import PolicyContext, PolicyKind
from elastico_core.sim.registry import default_registry
from elastico_core.sim.runner import cluster_for
from elastico_core.sim.simulator import SimConfig, SimWatcher, simulate
from elastico_core.sim.truth import ContentionTruth, table6_predictor
from tests.cli_runner import run_cli as cli

GPUS = 8


@pytest.fixture(scope="module")
def busy_day(store: ProfileStore):  # type: ignore[no-untyped-def]
    """Eight GPUs, a few hours at 1.5x the paper mix's load: jobs must share GPUs."""
    return paper_mix(0, PaperMixConfig(gpus=GPUS, hours=3, load=1.5), store=store, data_dir=None)


def _frozen(store: ProfileStore, trace, cfg: SimConfig):  # type: ignore[no-untyped-def]
    return run_learning(trace, cluster_for(GPUS), 0, store=store, truth=ContentionTruth(seed=0), predictor=table6_predictor(),
                        base=None, learn=LearnConfig(frozen=True), config=cfg)


def test_a_watching_run_is_bit_identical_to_a_plain_one(store: ProfileStore, busy_day) -> None:  # type: ignore[no-untyped-def]
    cfg = SimConfig(record_events=True)
    policy = default_registry().get(PolicyKind.ELASTICO)(PolicyContext(store, table6_predictor(), 0))
    assert isinstance(policy, ElasticoPolicy) and isinstance(Learner(policy, None, "a100-40gb", 40960.0), SimWatcher)
    plain = simulate(busy_day, policy, cluster_for(GPUS), 0, store=store, truth=ContentionTruth(seed=0), config=cfg)
    watched = _frozen(store, busy_day, cfg)
    assert watched.observations, "the trace must co-locate jobs"
    assert watched.result.jobs == plain.jobs and watched.result.event_log == plain.event_log
    assert watched.result.events == plain.events and watched.result.end_s == plain.end_s
    for name in ("t", "sm", "mem", "busy", "rate"):
        np.testing.assert_array_equal(getattr(watched.result.series, name), getattr(plain.series, name))
    assert watched.retrainings == () and watched.final is not None


def test_windows_measure_the_ground_truth_and_become_contract_rows(store: ProfileStore, busy_day) -> None:  # type: ignore[no-untyped-def]
    run = _frozen(store, busy_day, SimConfig())
    truth, mem = ContentionTruth(seed=0), run.gpu_mem_mib
    for o in run.observations:
        assert o.end_s - o.start_s >= LearnConfig().min_window_s
        assert o.true_a == pytest.approx(truth.slowdown(o.workload_a, o.profile_a, o.workload_b, o.profile_b, mem))
        assert o.true_b == pytest.approx(truth.slowdown(o.workload_b, o.profile_b, o.workload_a, o.profile_a, mem))
        assert abs(math.log(o.measured_a / o.true_a)) < 0.2 and o.predicted_a >= 1.0
    ds = runtime_dataset(run.observations, run.gpu_name, mem)
    assert ds is not None and ds.rows == len(run.observations)
    assert set(ds.frame["source"].to_list()) <= {"runtime", "suspect"}
    assert (ds.frame["window_start"] < ds.frame["window_end"]).all()
    # a row's features and keys are exactly what the planner builds for that pair: a model trained on them
    # recognises the planner's jobs (no cold start) and sees the same 46 numbers
    usable = [o for o, ok in zip(run.observations, ds.usable_mask(), strict=True) if ok]
    samples = ds.samples()
    batch = PairBatch(profile_batch([(o.workload_a, o.profile_a) for o in usable]),
                      profile_batch([(o.workload_b, o.profile_b) for o in usable]), np.full(len(usable), mem))
    np.testing.assert_allclose(samples.X[: len(usable)], batch_features(batch), equal_nan=True)
    keys = PairKeys.of_batch(batch)
    assert samples.keys.knobs_a[: len(usable)].tolist() == keys.knobs_a.tolist()
    assert samples.keys.workload_b[: len(usable)].tolist() == keys.workload_b.tolist()


def test_use_predictor_replaces_what_the_planner_asks(store: ProfileStore) -> None:
    ctx = PolicyContext(store, table6_predictor(), 0)
    for kind in (PolicyKind.ELASTICO, PolicyKind.ELASTICO_NO_IAC):
        policy = default_registry().get(kind)(ctx)
        assert isinstance(policy, ElasticoPolicy)
        old = policy.planner.predictor
        new = replace(table6_predictor(), name="new")
        policy.use_predictor(new)
        assert policy.context.predictor is new
        assert (policy.planner.predictor is new) == (kind is PolicyKind.ELASTICO)
        assert kind is PolicyKind.ELASTICO or policy.planner.predictor is old  # w/o IAC never asks a model


@pytest.mark.slow
def test_learning_from_runtime_pairs_beats_the_frozen_model(store: ProfileStore) -> None:
    day = paper_mix(0, PaperMixConfig(gpus=GPUS, hours=8, load=1.5), store=store, data_dir=None)
    cmp = compare_learning(day, cluster_for(GPUS), 0, store=store, truth=lambda s: ContentionTruth(seed=s),
                           predictor=table6_predictor(), base=None, learn=LearnConfig(retrain_every_s=3600.0))
    # hourly: with outbid preemption (production since it was measured) this 8-h day's first co-locations come
    # later, and a first retraining at 2 h has seen too few of them (0.52x the frozen error then, 0.43x hourly)
    frozen, learning = cmp.frozen, cmp.learning
    assert all(not r.promoted for r in frozen.retrainings) and frozen.final.name == "table6"
    promoted = [r for r in learning.retrainings if r.promoted]
    assert promoted and isinstance(learning.final, LearnedPredictor)
    assert all(r.challenger_mape is not None and r.champion_mape is not None and r.challenger_mape < r.champion_mape for r in promoted)
    f, g = frozen.error().mape, learning.error().mape
    assert f is not None and g is not None and g < 0.75 * f
    after = learning.error(promoted[0].at_s)
    assert after.mape is not None and after.mape < 0.5 * f
    assert learning.metrics.attainment > frozen.metrics.attainment
    same = cmp.final_on_frozen()  # the same pairs, the learned model against what the frozen day predicted
    assert same.mape is not None and same.mape < 0.5 * f
    doc = cmp.as_dict()
    assert doc["error_ratio"] == pytest.approx(g / f, abs=1e-4) and doc["attainment_gain"] > 0
    rows = cmp.learning_pairs()
    assert rows is not None and rows.rows == len(learning.observations)
    assert learning.final.model.kind is ModelKind.CF  # type: ignore[attr-defined]


def test_cli_user_errors_are_one_line_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for argv, match in (
        (["--truth", "none"], "nothing to learn"),
        (["--predictor", "oracle"], "unknown value 'oracle'"),
        (["--retrain-every-h", "0"], "retrain-every-h"),
        (["--policy", "volcano"], "needs an ElastiCo policy"),
        (["--rules", "reckless"], "unknown rules 'reckless'"),
        (["--predictor", "shipped", "--profiles", str(tmp_path)], "'shipped' is fitted on the training rows"),
    ):
        code, out, err = cli(capsys, "simulate", "learn", "--gpus", "8", "--hours", "0.5", "--no-mlflow", "--json", *argv)
        lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert code == 2 and out == "" and len(lines) == 1 and match in lines[0], (argv, err)


def test_cli_writes_the_comparison(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "simulate", "learn", "--gpus", "8", "--hours", "2", "--load", "1.5", "--retrain-every-h", "1",
                         "--public-data", str(tmp_path / "none"), "--no-mlflow", "--json", "--out", str(tmp_path / "o"))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["run"]["predictor"] == "table6" and doc["run"]["truth"] == "contention" and doc["run"]["rules"] is None
    assert {"frozen", "learning", "error_ratio", "attainment_gain", "final_model_on_frozen_windows"} <= set(doc)
    assert doc["frozen"]["windows"] > 0 and len(doc["learning"]["retrainings"]) >= 2
    for name in ("learning.json", "report.md", "report.html", "prediction_error.png", "runtime-pairs.parquet"):
        assert (tmp_path / "o" / name).is_file(), name
    assert "Retrainings of the learning run" in (tmp_path / "o" / "report.md").read_text()


def _cf_of_strangers() -> LearnedPredictor:
    """A factor model trained on pairs of two workloads the paper mix does not have, which halve each other:
    every pair of the day is a cold start, answered by its training mean (2x), above every tolerance."""
    rows = [{"gpu": "a100-40gb", "workload_a": a, "kind_a": "train", "knobs_a": "{}", "params_a": 25e6, "solo_tput_a": 100.0,
             "colo_tput_a": 50.0, "workload_b": b, "kind_b": "train", "knobs_b": "{}", "params_b": 25e6, "solo_tput_b": 100.0,
             "colo_tput_b": 50.0} for a in ("stranger-a", "stranger-b") for b in ("stranger-a", "stranger-b")]
    return LearnedPredictor(fit_model(CFRegressor(epochs=100), validate(pl.DataFrame(rows)).samples()), name="strangers")


@pytest.mark.slow
def test_cold_start_exploration_lets_a_fresh_model_learn(store: ProfileStore, busy_day) -> None:  # type: ignore[no-untyped-def]
    """From a model that knows none of the day's workloads, production's exploration co-locates them, measures
    them and learns them; without it nothing is co-located, so nothing is measured."""
    def day(rules, frozen: bool):  # type: ignore[no-untyped-def]
        # retrained every half hour: the few pairs of three hours on eight GPUs are learned while pairs still form.
        # Exploration alone is compared: with outbid preemption this tiny day forms four pairs, none after the
        # first promotion, so both arms keep running jobs running (``preempt_outbid=None``)
        rules = replace(rules, planner=replace(rules.planner, preempt_outbid=None))
        return run_learning(busy_day, cluster_for(GPUS), 0, store=store, truth=ContentionTruth(seed=0), predictor=_cf_of_strangers(),
                            base=None, learn=LearnConfig(retrain_every_s=1800.0, frozen=frozen), rules=rules)

    assert not day(variant("no-explore"), True).observations
    explored = day(PRODUCTION, False)
    assert len(explored.observations) >= 5
    promoted = [r for r in explored.retrainings if r.promoted]
    assert promoted and explored.final is not None and explored.final.name != "strangers"
    before = prediction_error([o for o in explored.observations if o.version == 0])
    after = prediction_error([o for o in explored.observations if o.version > 0])
    assert before.mape is not None and after.mape is not None and after.mape < 0.5 * before.mape
