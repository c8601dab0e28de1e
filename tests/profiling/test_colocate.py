"""``elastico profile colocate`` on CPU: the pair shares one device, measured interleaved; rows follow the contract."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.profiling.prof_helpers import FAST, cli_json
from tests.profiling.test_pairs_and_dataset import CONTRACT, OPTIONAL

MlflowClient = pytest.importorskip("mlflow.tracking", reason="MLflow lineage needs the ml extra").MlflowClient


def test_training_beside_inference_slows_both_down(
    workdir: Path, capsys: pytest.CaptureFixture[str], tiny_model: Path, mlflow_uri: str
) -> None:
    out = workdir / "colocation.csv"
    a = 'lstm:{"micro_batch": 128}'
    b = 'qwen-1.7b:{"max_num_seqs": 4, "max_model_len": 4096, "prefix_caching": true}'
    result = cli_json(capsys, "profile", "colocate", "--a", a, "--b", b, "--out", str(out), "--model", str(tiny_model),
                      "--profiles", str(workdir / "profiles"), *FAST)  # fmt: skip
    assert isinstance(result, dict)
    df = pl.read_csv(out)
    assert df.columns == CONTRACT + OPTIONAL and df.height == 1
    row = df.row(0, named=True)
    assert row["gpu"].startswith("cpu-") and (row["kind_a"], row["kind_b"]) == ("train", "infer")
    assert json.loads(row["knobs_a"])["micro_batch"] == 128 and json.loads(row["knobs_b"])["prefix_caching"] is True
    assert row["params_a"] > 0 and row["params_b"] > 0
    for x in ("a", "b"):
        assert row[f"solo_tput_{x}"] > 0 and row[f"colo_tput_{x}"] > 0
        assert 0 < row[f"sm_active_{x}"] <= 1 and row[f"fb_used_mb_{x}"] > 0 and row[f"tensor_active_{x}"] is None
        # interleaved: solo and shared windows of the same run, at least three rounds, the median inside its spread
        median = row[f"solo_tput_{x}"] / row[f"colo_tput_{x}"]
        assert row[f"repeats_{x}"] >= 3
        assert row[f"slowdown_min_{x}"] <= median + 1e-9 and median <= row[f"slowdown_max_{x}"] + 1e-9
    assert row["gpu_mem_mib"] > 0 and row["source"] in ("measured", "suspect")
    # two processes sharing one core slow each other down; a row that says otherwise is marked, not kept as a label
    assert row["source"] == "suspect" or min(row["solo_tput_a"] / row["colo_tput_a"], row["solo_tput_b"] / row["colo_tput_b"]) >= 0.97
    from elastico_core.iac.dataset import read_dataset

    assert read_dataset(out).rows == 1  # the IAC importer takes the row as it is
    run = MlflowClient(mlflow_uri).get_run(str(result["mlflow_run_id"]))
    assert run.data.metrics["slowdown_a"] > 0 and run.data.metrics["attempts"] in (1.0, 2.0)
    assert run.data.params["protocol"].startswith("interleaved")
    assert [d.dataset.name for d in run.inputs.dataset_inputs] == ["colocation"]
