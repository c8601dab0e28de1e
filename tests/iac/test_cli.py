"""`elastico iac ...` and `elastico bench iac`: JSON key names scripts rely on, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.cli_runner import run_cli as run


def test_evaluate_prints_the_table7_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, _ = run(capsys, "iac", "synthesize", "--out", str(tmp_path / "s.parquet"), "--pairs", "120", "--seed", "2")
    assert code == 0
    code, out, err = run(capsys, "iac", "evaluate", "--data", str(tmp_path / "s.parquet"), "--folds", "3", "--models", "linear,lightgbm", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == {"models", "best", "folds"} and doc["best"] in ("linear", "lightgbm") and doc["folds"] == 3
    for rep in doc["models"].values():
        assert set(rep) == {"overall", "by_type", "moderate_mape", "bound_coverage"}
        assert set(rep["overall"]) == {"mape", "r2", "samples"}
        assert set(rep["by_type"]) == {"T+T", "T+I", "I+I"}
        assert rep["overall"]["samples"] == 240
    assert "SYNTHETIC" in err


def test_bench_iac_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "bench", "iac", "--pairs", "200", "--model", "linear", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == {"pairs_per_s", "latency_ms"} and set(doc["latency_ms"]) == {"p50", "p99"}
    assert doc["pairs_per_s"] > 0


def test_bad_dataset_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    pl.DataFrame({"gpu": ["v100"], "workload_a": ["x"]}).write_csv(path)
    code, out, err = run(capsys, "iac", "evaluate", "--data", str(path), "--json")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "missing required column(s)" in err and "pairs.csv" in err


def test_unknown_model_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "iac", "evaluate", "--data", "synthetic:40", "--models", "xgboost")
    assert code == 2 and "models: unknown model 'xgboost'" in err


def test_gavel_json_is_accepted_directly(capsys: pytest.CaptureFixture[str], gavel_path: Path, tmp_path: Path) -> None:
    code, _out, err = run(capsys, "iac", "convert-gavel", "--in", str(gavel_path), "--out", str(tmp_path / "g.csv"))
    assert code == 0, err
    assert pl.read_csv(tmp_path / "g.csv").height > 900
