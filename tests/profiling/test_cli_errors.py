"""Bad input to ``elastico profile``: one line naming the culprit, exit code 2, nothing launched."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.profiling.prof_helpers import FAST, cli, cli_json


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["profile", "run", "--workload", "resnet18"], "unknown workload 'resnet18'"),
        (["profile", "run", "--workload", "lstm", "--knobs", '{"microbatch": 64}'], "unknown knob 'microbatch'"),
        (
            ["profile", "run", "--workload", "lstm", "--knobs", '{"micro_batch": 100}'],
            "knobs.micro_batch: value 100 is outside the grid",
        ),
        (
            ["profile", "sweep", "--workload", "lstm", "--grid", '{"micro_batch": [32, 48]}'],
            "values [48] are outside the grid",
        ),
        (["profile", "sweep", "--workload", "lstm", "--grid", '{"mb": [32]}'], "unknown knob 'mb'"),
        (["profile", "sweep", "--workload", "lstm", "--grid", "[1, 2]"], "grid: must be a JSON object"),
        (["profile", "run", "--workload", "lstm", "--cpus", "999"], "cores [999] are not available"),
        (["profile", "run", "--workload", "lstm", "--scale", "huge"], "unknown scale 'huge'"),
        (["profile", "colocate", "--a", "lstm", "--b", "gpt-9"], "unknown workload 'gpt-9'"),
        (["profile", "colocate-sweep", "--fraction", "1.5", "--dry-run"], "fraction: must lie in (0, 1]"),
        (["profile", "run", "--workload", "lstm", "--measure-s", "0"], "measure-s: must be > 0"),
    ],
    ids=[
        "workload",
        "knob",
        "off-grid",
        "grid-value",
        "grid-knob",
        "grid-shape",
        "cpus",
        "scale",
        "pair",
        "fraction",
        "window",
    ],
)
def test_bad_input_is_named(workdir: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, _, err = cli(capsys, *args, "--profiles", str(workdir / "p"), "--no-mlflow")
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (workdir / "p").exists()


def test_colocate_sweep_plans_a_stratified_sample(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = cli_json(capsys, "profile", "colocate-sweep", "--fraction", "0.25", "--dry-run", "--seed", "3")
    assert isinstance(plan, list) and {p["type"] for p in plan} == {"T+T", "T+I", "I+I"}
    assert len(plan) == round(0.25 * 36) + round(0.25 * 32) + round(0.25 * 10)
    assert plan == cli_json(capsys, "profile", "colocate-sweep", "--fraction", "0.25", "--dry-run", "--seed", "3")


@pytest.mark.slow  # nine measurement windows of two processes (the pair is one configuration twice)
def test_colocate_sweep_runs_and_appends(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = workdir / "colo.parquet"
    result = cli_json(capsys, "profile", "colocate-sweep", "--workloads", "ncf", "--fraction", "1", "--max-pairs", "1",
                      "--scale", "tiny", "--out", str(out), "--profiles", str(workdir / "p"), *FAST)  # fmt: skip
    assert isinstance(result, dict) and len(result["rows"]) == 1
    row = result["rows"][0]
    assert row["workload_a"] == row["workload_b"] == "ncf" and row["knobs_a"] == row["knobs_b"]
    assert pl.read_parquet(out).height == 1
    for x in ("a", "b"):  # each copy's solo windows are its own: the figures differ, the protocol holds
        assert row[f"repeats_{x}"] >= 3 and row[f"slowdown_min_{x}"] <= row[f"slowdown_max_{x}"]
        assert row[f"solo_tput_{x}"] > 0 and row[f"colo_tput_{x}"] > 0
    assert row["source"] in ("measured", "suspect") and result["suspect"] == (row["source"] == "suspect")
