"""``elastico plan`` and ``elastico bench planner`` as a user runs them: output, JSON keys, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def elastico(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "elastico_core.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_plan_prints_the_plan_queue_and_prices() -> None:
    r = elastico("plan", "--cluster", "examples/cluster.yaml", "--jobs", "examples/jobs.yaml")
    assert r.returncode == 0, r.stderr
    for text in ("Plan", "bert-finetune", "shadow prices", "objective", "IAC:"):
        assert text in r.stdout


def test_plan_reads_at_80_columns() -> None:
    """Short GPU ids, a knob legend, the pairs split and why, the predictor named; rows fit one line each."""
    r = subprocess.run([sys.executable, "-m", "elastico_core.cli", "plan", "--cluster", "examples/cluster.yaml",
                        "--jobs", "examples/jobs.yaml", "--running", "examples/running.json", "--predictor", "table"],
                       cwd=REPO, capture_output=True, text=True, timeout=300, env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    row = next(line for line in lines if line.strip().startswith("resnet-imagenet") and "smp/s" in line)
    assert "n0/" in row and "G" in row
    flat = " ".join(r.stdout.split())
    assert "mb = micro_batch" in flat and "seqs = max_num_seqs" in flat
    assert "Pairs kept apart" in flat and "tolerance" in flat
    assert "IAC: Table 6 pair lookup" in flat
    training_rows = [line for line in lines if "smp/s" in line and line.startswith(" ") and "amp" in line]
    assert len(training_rows) >= 5  # each training placement on one line


def test_plan_json_with_running_state() -> None:
    r = elastico("plan", "--cluster", "examples/cluster.yaml", "--jobs", "examples/jobs.yaml",
                 "--running", "examples/running.json", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert {"placements", "queued", "actions", "prices", "rounds", "objective"} <= set(plan)
    by_job = {p["job"]: p for p in plan["placements"]}
    assert set(by_job) | {q["job"] for q in plan["queued"]} >= {"bert-finetune", "label-reviews"}
    bert = next(a for a in plan["actions"] if a["job"] == "bert-finetune")
    assert bert["kind"] in ("keep", "switch", "migrate")
    for p in plan["placements"]:
        assert p["launch"]["env"]["ELASTICO_JOB_ID"] == p["job"]
        assert p["effective_throughput"] >= p["floor"] - 1e-6


def write(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text)
    return str(tmp / name)


CLUSTER = "cluster: {nodes: [{name: n, gpu: a100-40gb, gpus: 2}]}"


@pytest.mark.parametrize(
    ("jobs", "cluster", "expect"),
    [
        ("jobs: [{id: a, workload: gpt-9}]", CLUSTER, "job 'a': workload: unknown workload 'gpt-9'"),
        ("jobs: [{id: a, workload: bert, knobs: {amp: []}}]", CLUSTER, "job 'a': knobs: Value error, empty knob space"),
        ("jobs: [{id: a, workload: bert, floor: 99999}]", CLUSTER, "job 'a': floor: floor 99999 samples/s exceeds the best achievable"),
        ("jobs: [{id: a, workload: bert}]", "cluster: {nodes: [{name: n, gpu: a100-40gb, gpus: 0}]}", "the cluster has no GPUs"),
        ("jobs: [{id: a, workload: bert, weight: -2}]", CLUSTER, "job 'a': weight: Input should be greater than 0"),
        ("jobs: [{id: a, workload: bert, work: lots}]", CLUSTER, "job 'a': work: Input should be a valid number"),
        ("jobs: [{id: a, workload: bert", CLUSTER, "malformed YAML"),
        ("jobs: [{id: a, workload: qwen-1.7b, gpus: 2, knobs: {tensor_parallel_size: 4}}]", CLUSTER,
         "job 'a': knobs.tensor_parallel_size: 4 exceeds the job's gpus (2)"),
        ("jobs: [{id: a, workload: qwen-1.7b, gpus: 2, knobs: {tensor_parallel_size: 3}}]", CLUSTER,
         "job 'a': knobs.tensor_parallel_size: 3 is not a power of two"),
    ],
    ids=["unknown-workload", "empty-space", "unreachable-floor", "no-gpus", "negative", "non-numeric", "malformed",
         "tp-above-gpus", "tp-not-power-of-two"],
)
def test_bad_input_exits_2_with_one_line(tmp_path: Path, jobs: str, cluster: str, expect: str) -> None:
    r = elastico("plan", "--cluster", write(tmp_path, "c.yaml", cluster), "--jobs", write(tmp_path, "j.yaml", jobs))
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_a_four_gpu_inference_job_plans_tensor_parallel_on_one_node(tmp_path: Path) -> None:
    jobs = write(tmp_path, "j.yaml", "jobs: [{id: serve, workload: llama-3-7b, floor: 100, gpus: 4},"
                                     " {id: label, workload: qwen-1.7b, floor: 200}]")
    r = elastico("plan", "--cluster", "examples/cluster.yaml", "--jobs", jobs, "--json")
    assert r.returncode == 0, r.stderr
    (serve,) = [p for p in json.loads(r.stdout)["placements"] if p["job"] == "serve"]
    assert serve["knobs"]["tensor_parallel_size"] == 4 and len(serve["gpus"]) == 4
    assert len({g.split("/")[0] for g in serve["gpus"]}) == 1  # one node
    assert "--tensor-parallel-size=4" in serve["launch"]["args"]
    assert serve["launch"]["env"]["ELASTICO_KNOB_TENSOR_PARALLEL_SIZE"] == "4"


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    r = elastico("plan", "--cluster", str(tmp_path / "nope.yaml"), "--jobs", "examples/jobs.yaml")
    assert r.returncode == 2 and "nope.yaml: cannot read" in r.stderr


def test_bench_planner_json_keys() -> None:
    r = elastico("bench", "planner", "--jobs", "12", "--gpus", "8", "--seed", "1", "--milp", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {"p50", "p99"} <= set(out["latency_ms"])
    for key in ("rounds", "iterations", "placed", "queued", "objective", "milp_objective", "milp_seconds", "gap"):
        assert key in out, key
    assert 0.0 <= out["gap"] <= 0.05 and out["milp_objective"] >= out["objective"] - 1e-6


def test_bench_planner_compares_queues_with_none() -> None:
    r = elastico("bench", "planner", "--jobs", "24", "--gpus", "16", "--queues", "3", "--compare-queues", "--repeats", "1")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["queues"] == 3 and out["seeds"] == [0] and set(out["per_seed"]) == {"0"}
    cpu = out["cpu_ms_per_epoch"]
    assert cpu["without"] > 0 and cpu["with"] > 0 and out["ratio"] == pytest.approx(cpu["with"] / cpu["without"])
    bad = elastico("bench", "planner", "--compare-queues")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--compare-queues needs --queues N" in bad.stderr


def test_bench_planner_callgrind_outside_callgrind_is_one_line() -> None:
    """``--callgrind`` switches counting on for the measured epochs; outside callgrind that is a clear error,
    not counts silently missing (callgrind_control itself exits 0 when it finds no such process)."""
    r = elastico("bench", "planner", "--jobs", "12", "--gpus", "8", "--callgrind")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "callgrind" in r.stderr, (r.stdout, r.stderr)
    both = elastico("bench", "planner", "--queues", "2", "--compare-queues", "--callgrind")
    assert both.returncode == 2 and "--callgrind counts one setting" in both.stderr


@pytest.mark.slow
def test_plan_with_a_factor_champion_names_the_workloads_it_explores(tmp_path: Path) -> None:
    """A `cf` champion trained on the shipped H200 pairs has never seen most of the example jobs' workloads:
    `elastico plan` plans their pairs at the cold-start assumption, as the controller does, and says so."""
    env = {"COLUMNS": "200", "PATH": "/usr/bin:/bin", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "HOME": str(tmp_path)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "elastico_core.cli", *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=600, env=env)

    pairs = next((REPO / "profiles" / "colocation").glob("h200-*.parquet"))
    trained = run("iac", "train", "--data", str(pairs), "--model", "cf", "--register")
    assert trained.returncode == 0, trained.stderr
    r = run("plan", "--cluster", str(REPO / "examples/cluster.yaml"), "--jobs", str(REPO / "examples/jobs.yaml"),
            "--profiles", str(REPO / "profiles"), "--predictor", "champion", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    notes = [n for n in plan["notes"] if n.startswith("interference model")]
    assert len(notes) == 1 and "cold-start assumption of 1.2x" in notes[0], plan["notes"]
    assert "qwen-1.7b" in notes[0] and "bert" not in notes[0]  # the H200 pairs measured bert, not qwen
