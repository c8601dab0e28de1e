"""``elastico profile sweep`` on CPU: measured rows ordered as the knobs imply, cached, linked to MLflow."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from tests.profiling.prof_helpers import FAST, cli, cli_json

MlflowClient = pytest.importorskip("mlflow.tracking", reason="MLflow lineage needs the ml extra").MlflowClient

GRID = json.dumps({"micro_batch": [32, 128], "checkpointing": [False, True], "amp": [False], "dp": [1]})


Knobs = tuple[int, bool]


def _by_knobs(rows: list[dict[str, object]]) -> dict[Knobs, dict[str, object]]:
    out = {}
    for row in rows:
        k = json.loads(str(row["knobs"]))
        out[(k["micro_batch"], k["checkpointing"])] = row
    return out


def _stored(rows: dict[Knobs, dict[str, object]]) -> dict[Knobs, dict[str, object]]:
    """The rows without what the engine reported during the run (not part of the stored profile)."""
    return {k: {f: v for f, v in r.items() if f not in ("engine", "prefix_hit_rate")} for k, r in rows.items()}


class _BestOf:
    """Throughput orderings judged on the best of up to three windows per configuration.

    A 1-s window on a shared machine can be slowed by a neighbour the on-CPU filter cannot see (a busy
    sibling hyper-thread, a frequency drop); noise only ever slows a window down, so the best window
    of each configuration is the closest to its undisturbed speed (as ``timeit`` takes the minimum).
    More windows are measured, into scratch stores, only while an ordering does not hold.
    """

    def __init__(
        self, capsys: pytest.CaptureFixture[str], workdir: Path, workload: str, rows: dict[Knobs, dict[str, object]]
    ) -> None:
        self.capsys, self.workdir, self.workload = capsys, workdir, workload
        self.seen = {k: [float(r["throughput"])] for k, r in rows.items()}  # type: ignore[arg-type]
        self.windows = 1

    def holds(self, ordering: Callable[[dict[Knobs, float]], bool]) -> bool:
        while not ordering(best := {k: max(v) for k, v in self.seen.items()}) and self.windows < 3:
            scratch = self.workdir / f"again-{self.windows}"
            self.windows += 1
            again = cli_json(
                self.capsys,
                "profile",
                "sweep",
                "--workload",
                self.workload,
                "--grid",
                GRID,
                "--no-mlflow",
                "--profiles",
                str(scratch),
                *FAST,
            )
            assert isinstance(again, dict) and again["measured"] == 4
            for k, r in _by_knobs(again["rows"]).items():
                self.seen[k].append(float(r["throughput"]))  # type: ignore[arg-type]
        return ordering(best)


@pytest.mark.parametrize("workload", ["lstm", "transformer"])
def test_sweep_orders_throughput_and_memory_as_the_knobs_imply(
    workdir: Path, capsys: pytest.CaptureFixture[str], mlflow_uri: str, workload: str
) -> None:
    store = workdir / "profiles"
    result = cli_json(
        capsys, "profile", "sweep", "--workload", workload, "--grid", GRID, "--profiles", str(store), *FAST
    )
    assert isinstance(result, dict) and result["measured"] == 4
    rows = _by_knobs(result["rows"])
    assert len(rows) == 4 and all(r["source"] == "measured" for r in rows.values())
    best = _BestOf(capsys, workdir, workload, rows)
    # a larger micro-batch amortises the per-iteration overhead: more samples/s (the tiny models are far from saturation)
    assert best.holds(lambda t: t[(128, False)] > 1.1 * t[(32, False)]), best.seen
    # activation checkpointing: recompute the forward pass (slower), keep fewer activations (less memory)
    assert best.holds(lambda t: t[(128, True)] < t[(128, False)]), best.seen
    assert rows[(128, True)]["gpu_mem_mib"] < rows[(128, False)]["gpu_mem_mib"]  # type: ignore[operator]
    assert rows[(128, False)]["gpu_mem_mib"] > rows[(32, False)]["gpu_mem_mib"]  # type: ignore[operator]
    for r in rows.values():  # the resource vector of a one-core CPU device
        assert 0 < r["sm"] <= 1 and 0 < r["cpu_cores"] <= 1.05 and r["host_mem_mib"] > 50  # type: ignore[operator]
        assert r["sm_active"] == r["sm"] and r["fb_used_mb"] == r["gpu_mem_mib"] and r["tensor_active"] is None
    sig = result["signature"]
    assert str(sig).startswith("cpu-") and "|1c|torch-" in str(sig)

    # the store holds the rows under the CPU signature, each with the MLflow run that measured it
    run_id = result["mlflow_run_id"]
    assert run_id and all(r["mlflow_run_id"] == run_id for r in rows.values())
    stored = pl.read_parquet(next(store.glob("cpu-*.parquet")))
    assert stored.height == 4 and set(stored["mlflow_run_id"]) == {run_id} and set(stored["source"]) == {"measured"}
    shown = cli_json(capsys, "profiles", "show", "--profiles", str(store), "--workload", workload)
    assert isinstance(shown, list) and {r["mlflow_run_id"] for r in shown} == {run_id}
    code, _, _ = cli(capsys, "profiles", "show", "--profiles", str(store), "--workload", workload)
    assert code == 0

    # the MLflow run: params, metrics, the rows as artifact and as dataset input
    run = MlflowClient(mlflow_uri).get_run(str(run_id))
    assert run.data.params["workload"] == workload and run.data.params["hardware_signature"] == sig
    assert json.loads(run.data.params["knob_grid"])["micro_batch"] == [32, 128]
    assert run.data.metrics["configs_measured"] == 4 and "throughput" in run.data.metrics
    assert [d.dataset.name for d in run.inputs.dataset_inputs] == [f"profiles-{workload}"]
    artifacts = [a.path for a in MlflowClient(mlflow_uri).list_artifacts(str(run_id), "data")]
    assert artifacts == [f"data/profiles-{workload}.parquet"]

    # a second sweep on the same signature is served from the store
    again = cli_json(
        capsys, "profile", "sweep", "--workload", workload, "--grid", GRID, "--profiles", str(store), *FAST
    )
    assert isinstance(again, dict) and again["measured"] == 0
    # the stored row comes back as it was; what the engine reported lives only with the run that measured it
    assert all(r["engine"] == "torch" for r in rows.values())
    assert all(r["engine"] is None and r["prefix_hit_rate"] is None for r in again["rows"])  # type: ignore[index]
    assert _stored(_by_knobs(again["rows"])) == _stored(rows)


def test_profile_run_measures_one_inference_configuration(
    workdir: Path, capsys: pytest.CaptureFixture[str], tiny_model: Path
) -> None:
    knobs = json.dumps({"max_num_seqs": 4, "prefix_caching": True, "max_model_len": 4096})
    result = cli_json(capsys, "profile", "run", "--workload", "deepseek-1.5b", "--knobs", knobs, "--model", str(tiny_model),
                      "--profiles", str(workdir / "p"), *FAST)  # fmt: skip
    assert isinstance(result, dict)
    (row,) = result["rows"]
    assert row["unit"] == "tokens/s" and row["throughput"] > 0 and row["source"] == "measured"
    assert json.loads(row["knobs"])["gpu_memory_utilization"] == 0.9  # defaults fill the rest
    assert row["fb_used_mb"] > 0 and 0 < row["sm_active"] <= 1
