"""Reasons that hold: a job that can never run is refused at submit naming the resource and the largest
figure; every reason repeats the numbers the plan shows; "what would admit it" is a number, not a stock line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runner import run_cli
from tests.conftest import REPO

SMALL = """\
cluster:
  name: small
  nodes:
    - {name: n, gpu: a100-40gb, gpus: 2, cpu_cores: 8, host_mem_gib: 4}
"""
ONE_GPU = "cluster:\n  name: one\n  nodes:\n    - {name: n, gpu: a100-80gb, gpus: 1}\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_job_that_never_fits_host_memory_is_refused_at_submit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = _write(tmp_path, "small.yaml", SMALL)
    jobs = _write(tmp_path, "jobs.yaml", "jobs:\n  - {id: bert-a, workload: bert, floor: 10}\n")
    state = tmp_path / "state.db"
    code, _, err = run_cli(capsys, "jobs", "submit", "--spec", str(jobs), "--state", str(state), "--cluster", str(cluster))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "job 'bert-a'" in err and "16.0 GiB of host memory on one node" in err
    assert "the largest node (n) has 4.0 GiB" in err
    assert not state.exists(), "a refused file creates nothing"


def test_without_a_flag_submit_checks_against_the_controllers_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _write(tmp_path, "small.yaml", SMALL.replace("host_mem_gib: 4", "host_mem_gib: 20"))
    state = str(tmp_path / "state.db")
    assert run_cli(capsys, "state", "upgrade", "--state", state)[0] == 0
    code, _, _ = run_cli(capsys, "controller", "run", "--once", "--cluster", str(cluster), "--state", state,
                         "--predictor", "table")
    assert code == 0
    jobs = _write(tmp_path, "jobs.yaml", "jobs:\n  - {id: tiny, workload: ncf, floor: 1}\n"
                  "  - {id: llama, workload: llama-3-7b, floor: 1}\n  - {id: qwen, workload: qwen-1.7b, floor: 1}\n")
    code, _, err = run_cli(capsys, "jobs", "submit", "--spec", str(jobs), "--state", state)
    assert code == 2 and "job 'llama'" in err and "(cluster 'small')" in err and "1 more job that" in err
    assert "32.0 GiB of host memory" in err and "the largest node (n) has 20.0 GiB" in err
    code, out, _ = run_cli(capsys, "jobs", "list", "--json", "--state", state)
    assert json.loads(out) == []  # all or none: the job that fits was not registered either


def test_a_floor_no_configuration_reaches_is_refused_with_the_floor_that_would_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = _write(tmp_path, "jobs.yaml", "jobs:\n  - {id: fast, workload: bert, floor: 99999}\n")
    code, _, err = run_cli(capsys, "jobs", "submit", "--spec", str(jobs), "--state", str(tmp_path / "s.db"),
                           "--cluster", str(REPO / "examples/cluster.yaml"))
    assert code == 2 and "floor 99999 samples/s exceeds the best achievable" in err


def test_a_custom_workload_short_of_gpu_memory_is_told_so_not_blamed_on_its_floor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = _write(tmp_path, "jobs.yaml", """\
workloads:
  - {name: big-vit, kind: train, params: 22000000, knobs: {micro_batch: [64, 128]},
     shape: {memory_gib: [60, 90], gflops_per_sample: 13.8, host_mem_gib: 1}}
jobs:
  - {id: vit, workload: big-vit, floor: 1}
""")
    code, _, err = run_cli(capsys, "plan", "--cluster", str(_write(tmp_path, "c.yaml", SMALL)), "--jobs", str(jobs))
    assert code == 2 and "GPU memory on one GPU" in err and "38.5 GiB for jobs" in err  # 40 GiB less M_sys and the 1 GiB margin
    assert "best achievable 0" not in err


def test_impossible_memory_anchors_name_the_file_and_the_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for anchors, words in (("[0.5, 60]", "cannot be met"), ("[6, 5]", "0 < min < max")):
        jobs = _write(tmp_path, "odd.yaml", f"""\
workloads:
  - {{name: odd, kind: train, params: 22000000, knobs: {{micro_batch: [64, 128]}}, shape: {{memory_gib: {anchors}}}}}
jobs:
  - {{id: o, workload: odd}}
""")
        code, _, err = run_cli(capsys, "jobs", "submit", "--spec", str(jobs), "--state", str(tmp_path / "s.db"))
        assert code == 2 and err.count("\n") == 1, err
        assert "odd.yaml: workload 'odd': shape.memory_gib:" in err and words in err


def test_the_interference_reason_repeats_the_pairs_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ResNet-50 and PPO on one 80 GB GPU: the pair is kept apart; the queued job's reason gives the flagged
    pairing's worse side (its slowdown above its tolerance), the numbers of the "pairs kept apart" table."""
    jobs = _write(tmp_path, "jobs.yaml", "jobs:\n  - {id: a, workload: resnet50, floor: 1}\n"
                  "  - {id: b, workload: ppo, floor: 1}\n")
    code, out, _ = run_cli(capsys, "plan", "--cluster", str(_write(tmp_path, "one.yaml", ONE_GPU)), "--jobs", str(jobs),
                           "--predictor", "table", "--json")
    assert code == 0
    plan = json.loads(out)
    (queued,) = plan["queued"]
    violations = [v for r in plan["rounds"] for v in r["violations"]]
    assert violations and queued["code"] == "interference"
    v = violations[-1]
    worse = max(zip(v["slowdown"], v["tau"], strict=True), key=lambda st: st[0] - st[1])
    short = queued["shortfall"]
    assert (short["free"], short["need"]) == pytest.approx(worse) and short["free"] > short["need"]
    assert short["holders"] == [j for j in v["jobs"] if j != queued["job"]]
    assert f"{worse[0]:.2f}x slowdown" in queued["reason"] and f"tolerance is {worse[1]:.2f}x" in queued["reason"]


def test_what_would_admit_each_job_is_its_own_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On a saturated cluster every queued job's hint has a figure, reasons never claim "higher value", and
    the jobs a reason names as holders are placed where it says."""
    code, out, _ = run_cli(capsys, "plan", "--cluster", str(REPO / "scripts/demo/cluster.yaml"),
                           "--jobs", str(REPO / "examples/jobs.yaml"), "--predictor", "table", "--json")
    assert code == 0
    plan = json.loads(out)
    placed = {p["job"]: p["gpus"] for p in plan["placements"]}
    assert plan["queued"]
    from elastico_core.model.explain import explain_wait

    hints = []
    for q in plan["queued"]:
        assert "higher value" not in q["reason"]
        why = explain_wait(q["code"], q["reason"], q["shortfall"])
        assert any(ch.isdigit() for ch in why.admit_hint), why
        hints.append(why.admit_hint)
        for holder in q["shortfall"]["holders"]:
            assert any(g.startswith(q["shortfall"]["where"]) for g in placed[holder])
    assert len(plan["queued"]) == 1 or len(set(hints)) > 1


def test_small_mistakes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args, words in (
        (("profiles", "show", "--workload", "bertt"), "did you mean bert?"),
        (("profiles", "show", "--gpu", "v100"), "unknown GPU model 'v100'"),
        (("profiles", "show", "--source", "guessed"), "unknown source 'guessed'"),
    ):
        code, _, err = run_cli(capsys, *args)
        assert code == 2 and err.count("\n") == 1 and words in err, (args, err)
    code, out, _ = run_cli(capsys, "profiles", "show", "--gpu", "a100", "--workload", "bert", "--json")
    assert code == 0 and json.loads(out) and all(r["workload"] == "bert" for r in json.loads(out))
    jobs = _write(tmp_path, "q.yaml", 'jobs:\n  - {id: s, workload: bert, floor: 1, knobs: {micro_batch: ["64"]}}\n')
    code, _, err = run_cli(capsys, "plan", "--cluster", str(REPO / "examples/cluster.yaml"), "--jobs", str(jobs))
    assert code == 2 and "'64' is a string; write the number 64 without quotes" in err
    code, out, _ = run_cli(capsys, "jobs", "--help")
    assert "requeue" in out
