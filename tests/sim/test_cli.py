"""``elastico simulate`` / ``simulate sweep`` / ``simulate import-philly`` / ``bench sim`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runner import run_cli as cli
from tests.sim.sim_helpers import write_csv

HEADER = ("job_id", "submit_time_s", "duration_s", "num_gpus", "kind", "workload")
ROWS = [("a", 0, 300, 1, "train", "resnet50"), ("b", 5, 200, 2, "train", "bert"), ("c", 9, 120, 1, "infer", "qwen-1.7b"),
        ("d", 30, 90, 1, "train", "ppo"), ("e", 31, 400, 1, "train", "ncf")]
KEYS = {"avg_jct_s", "median_jct_s", "p95_jct_s", "throughput", "sm_util", "mem_util", "attainment",
        "sched_latency_ms_p50", "jobs_finished"}


@pytest.fixture
def trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # anything written to the working directory lands in tmp
    return write_csv(tmp_path / "t.csv", HEADER, ROWS)


def test_json_document(capsys: pytest.CaptureFixture[str], trace: Path) -> None:
    code, out, err = cli(capsys, "simulate", "--trace", str(trace), "--gpus", "4", "--policies", "volcano,lucid,elastico",
                         "--json", "--no-mlflow")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["baseline"] == "volcano"
    assert set(doc["policies"]) == {"volcano", "lucid", "elastico"}
    for m in doc["policies"].values():
        assert set(m) == KEYS
        assert m["jobs_finished"] == 5
        assert 0 <= m["sm_util"] <= 1 and 0 <= m["mem_util"] <= 1 and 0 <= m["attainment"] <= 1
    assert "simulated" in err  # the progress bar is on stderr


def test_out_folder_and_mlflow(capsys: pytest.CaptureFixture[str], trace: Path, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    out_dir = tmp_path / "report"
    code, _, err = cli(capsys, "simulate", "--trace", str(trace), "--gpus", "4", "--policies", "volcano,greedy,elastico,elastico-no-rst",
                       "--out", str(out_dir))
    assert code == 0, err
    for name in ("metrics.json", "report.md", "report.html", "jct_cdf.png", "queue_by_arrival.png", "sm_util.png",
                 "gpu_occupancy.png", "trace.csv"):
        assert (out_dir / name).is_file(), name
    md = (out_dir / "report.md").read_text()
    assert "Table 4 shape" in md and "Table 5 shape" in md and "w/o RST" in md
    assert "logged to MLflow run" in err
    assert (tmp_path / "mlflow.db").is_file()
    assert (tmp_path / ".elastico" / "mlartifacts").is_dir()
    metrics = json.loads((out_dir / "metrics.json").read_text())
    assert metrics["policies"]["elastico"]["vs_baseline"]["avg_jct"] > 0


def test_several_seeds(capsys: pytest.CaptureFixture[str], trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = cli(capsys, "simulate", "--trace", str(trace), "--gpus", "4", "--policies", "volcano,elastico,elastico-no-pds",
                         "--seeds", "0-2", "--json", "--no-mlflow")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["baseline"] == "volcano" and doc["seeds"] == [0, 1, 2]
    for m in doc["policies"].values():
        assert set(m) == KEYS and m["jobs_finished"] == 5
    assert set(doc["per_seed"]) == {"0", "1", "2"}
    spread = doc["vs_baseline"]["elastico"]["avg_jct"]
    assert spread["min"] <= spread["mean"] <= spread["max"]
    assert {(c["policy"], c["other"]) for c in doc["claims"]} == {("elastico", "volcano"), ("elastico", "elastico-no-pds")}
    assert "seed 2" in err  # a progress bar per seed and policy
    # the report folder and MLflow: means as metrics, each seed as a step
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    out_dir = tmp_path / "seeds"
    code, out, err = cli(capsys, "simulate", "--trace", str(trace), "--gpus", "4", "--policies", "volcano,elastico",
                         "--seeds", "3,5", "--out", str(out_dir))
    assert code == 0, err
    for name in ("metrics.json", "report.md", "report.html", "jct_by_seed.png", "jct_cdf.png", "trace-seed3.csv", "trace-seed5.csv"):
        assert (out_dir / name).is_file(), name
    md = (out_dir / "report.md").read_text()
    assert "over 2 seeds" in md and "seed by seed" in md and "Average JCT per seed" in md
    assert "Table 4 shape over 2 seeds" in out  # the tables on stdout without --json
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.search_runs([client.get_experiment_by_name("elastico-simulate").experiment_id])[0]
    assert run.data.params["seeds"] == "[3, 5]"
    history = client.get_metric_history(run.info.run_id, "elastico.avg_jct_s.by_step")
    assert sorted(m.step for m in history) == [3, 5]
    assert run.data.metrics["elastico.avg_jct_s"] == pytest.approx(sum(m.value for m in history) / 2, rel=1e-6)


def test_seeds_in_worker_processes_decide_as_in_one(capsys: pytest.CaptureFixture[str], trace: Path) -> None:
    args = ("simulate", "--trace", str(trace), "--gpus", "4", "--policies", "volcano,elastico", "--seeds", "0-2", "--json", "--no-mlflow")
    docs = []
    for workers in ("1", "2"):
        code, out, err = cli(capsys, *args, "--workers", workers)
        assert code == 0, err
        docs.append(json.loads(out))
    assert "seed 2" in err and "h simulated" in err  # a bar per seed on stderr

    def decisions(doc: dict) -> dict:  # everything but the wall-clock figures, which share the cores
        return {s: {p: {k: v for k, v in m.items() if k != "sched_latency_ms_p50"} for p, m in ps.items()}
                for s, ps in doc["per_seed"].items()}

    assert decisions(docs[0]) == decisions(docs[1])
    assert docs[0]["vs_baseline"]["elastico"]["avg_jct"] == docs[1]["vs_baseline"]["elastico"]["avg_jct"]


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--gpus", "0"], "a cluster needs at least one GPU"),
        (["--policies", "volcano,slurm"], "unknown policy 'slurm'"),
        (["--truth", "oracle"], "unknown value 'oracle'"),
        (["--gpus", "1"], r"line 3 \(job 'b'\): num_gpus: asks for 2 GPUs, the cluster has 1"),
        (["--seeds", "3-1"], "seeds: a seed range needs 0 <= first <= last"),
        (["--seeds", "0,1", "--save-trace", "t2.csv"], "save_trace: --save-trace writes one seed's trace"),
        (["--seeds", "0,1", "--workers", "0"], "workers: need at least one worker, got 0"),
    ],
    ids=["zero-gpus", "unknown-policy", "unknown-truth", "gpus-beyond-cluster", "bad-seeds", "save-trace-with-seeds", "no-workers"],
)
def test_user_errors_are_one_line_exit_2(capsys: pytest.CaptureFixture[str], trace: Path, argv: list[str], match: str) -> None:
    code, out, err = cli(capsys, "simulate", "--trace", str(trace), "--no-mlflow", "--json", *argv)
    assert code == 2 and out == ""
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1
    import re

    assert re.search(match, lines[0]), lines[0]


def test_bad_trace_file_names_the_row(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    bad = write_csv(tmp_path / "bad.csv", HEADER, [("a", 0, 10, 1, "train", "bert"), ("b", 0, -4, 1, "train", "bert")])
    code, _, err = cli(capsys, "simulate", "--trace", str(bad), "--no-mlflow", "--json")
    assert code == 2 and "line 3 (job 'b'): duration_s: must be > 0" in err


def test_empty_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    empty = write_csv(tmp_path / "e.csv", HEADER, [])
    code, out, err = cli(capsys, "simulate", "--trace", str(empty), "--gpus", "8", "--no-mlflow", "--json", "--out", str(tmp_path / "o"))
    assert code == 0, err
    doc = json.loads(out)
    assert all(m["jobs_finished"] == 0 and m["avg_jct_s"] == 0 for m in doc["policies"].values())


def test_sweep_and_bench(capsys: pytest.CaptureFixture[str], trace: Path, tmp_path: Path) -> None:
    code, out, err = cli(capsys, "simulate", "sweep", "--trace", str(trace), "--gpus", "4,8", "--loads", "50,100",
                         "--load-gpus", "4", "--policies", "volcano,greedy", "--json", "--no-mlflow", "--out", str(tmp_path / "sw"))
    assert code == 0, err
    doc = json.loads(out)
    assert [r["gpus"] for r in doc["scale"]] == [4, 8] and [r["load"] for r in doc["load"]] == [0.5, 1.0]
    assert "Table 8 shape" in (tmp_path / "sw" / "sweep.md").read_text()
    code, out, err = cli(capsys, "bench", "sim", "--gpus", "8", "--hours", "1", "--policies", "volcano")
    assert code == 0, err
    bench = json.loads(out)["policies"]["volcano"]
    assert bench["events"] > 0 and bench["events_per_s"] > 0


def test_import_philly(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    src = write_csv(tmp_path / "philly.csv", ("timestamp", "duration", "num_gpus", "gpu_time", "cluster"),
                    [("2017-10-01 00:00:00", 100.0, 1, 100.0, "vc1"), ("2017-10-01 00:10:00", 50.0, 2, 100.0, "vc2")])
    code, out, err = cli(capsys, "simulate", "import-philly", str(src), "--out", str(tmp_path / "p.csv"), "--start-h", "0")
    assert code == 0, err
    assert json.loads(out)["jobs"] == 2
    code, out, err = cli(capsys, "simulate", "--trace", str(tmp_path / "p.csv"), "--gpus", "2", "--policies", "volcano",
                         "--json", "--no-mlflow")
    assert code == 0 and json.loads(out)["policies"]["volcano"]["jobs_finished"] == 2
