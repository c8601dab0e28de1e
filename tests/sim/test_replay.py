"""``elastico bench replay``: the planner replayed on a recorded window decides what the simulation did."""

from __future__ import annotations

import json

import pytest

from elastico_core.model.errors import SpecError
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.replay import ReplayWindow, record, replay
from tests.cli_runner import run_cli as cli


def test_a_replayed_window_reproduces_the_simulations_plans(store: ProfileStore) -> None:
    window = ReplayWindow(gpus=64, hours=2, start=40, calls=12, warmup=10)
    rec = record(window, store)
    assert len(rec.inputs) == 22 and rec.policy.observer is None
    out = replay(rec, window)
    assert out["calls"] == 12 and out["same_as_simulation"] is True
    assert out["mean_running_jobs"] > 0 and out["us_per_call"] > 0
    assert set(out["stages_us_per_call"]) >= {"prepare", "esp", "pack", "actions"}  # type: ignore[arg-type]


def test_a_window_past_the_day_or_before_its_warmup_is_refused(store: ProfileStore, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SpecError, match=r"only .* planner calls"):
        record(ReplayWindow(gpus=16, hours=1, start=30, calls=10, warmup=10), store)
    with pytest.raises(ValueError, match="warmup <= start"):
        ReplayWindow(start=5, warmup=10)
    code, _, err = cli(capsys, "bench", "replay", "--from", "5", "--warmup", "10")
    assert code == 2 and "warmup <= start" in err
    code, out, _ = cli(capsys, "bench", "replay", "--gpus", "64", "--hours", "2", "--from", "20", "--calls", "3", "--warmup", "5")
    assert code == 0 and json.loads(out)["same_as_simulation"] is True
