"""gpucheck: the measuring side runs with only torch, numpy, psutil and nvidia-ml-py, and its records import.

The run happens in a virtualenv that holds exactly those distributions (and what they require), with
the checkout on PYTHONPATH, as on a bare CUDA image; ``--device cpu --quick`` takes the same path as
a GPU run at tiny scale.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from elastico_core.profiling.records import COLUMNS
from tests.cli_runner import run_cli
from tests.profiling.bare_venv import build

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("bare") / "venv")


@pytest.fixture(scope="module")
def quick_run(bare_python: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("gpucheck")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELASTICO_", "PYTHON"))}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [str(bare_python), "-m", "elastico_core.profiling.gpucheck", "--device", "cpu", "--quick", "--out", str(out)],
        cwd=out, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return out, done


def test_the_bare_venv_has_only_what_a_cuda_image_has(bare_python: Path) -> None:
    check = "import torch, numpy, psutil, pynvml\nfor m in ('polars', 'pydantic', 'sqlalchemy', 'mlflow', 'yaml', 'typer'):\n" \
            "    try:\n        __import__(m)\n    except ImportError:\n        continue\n    raise SystemExit(m)\n"  # fmt: skip
    done = subprocess.run([str(bare_python), "-c", check], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_quick_gpucheck_measures_everything_in_a_bare_venv(quick_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, done = quick_run
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["colocation.csv", "measurements.jsonl", "report.md"]
    records = [json.loads(line) for line in (out / "measurements.jsonl").read_text().splitlines()]
    kinds = [r["record"] for r in records]
    assert kinds.count("run") == 1 and kinds.count("solo") == 3 and kinds.count("pair") == 1 and kinds.count("memcap") == 2
    for r in records:
        if r["record"] == "solo":
            assert r["throughput"] > 0 and r["gpu_mem_mib"] > 0 and r["signature"]["gpu"].startswith("cpu-")
    # the memory cap both ways: too small ends in the dedicated out-of-memory exit, enough runs within it
    caps = {r["case"]: r for r in records if r["record"] == "memcap"}
    assert caps["too small"]["oom"] and caps["too small"]["exit_code"] == 75 and caps["too small"]["passed"]
    assert caps["enough"]["ran"] and not caps["enough"]["oom"] and caps["enough"]["passed"]
    # the pair: interleaved, at least three repeats per side, min <= median <= max
    pair = next(r for r in records if r["record"] == "pair")["row"]
    for x in ("a", "b"):
        assert pair[f"repeats_{x}"] >= 3
        median = pair[f"solo_tput_{x}"] / pair[f"colo_tput_{x}"]
        assert pair[f"slowdown_min_{x}"] <= median + 1e-9 <= pair[f"slowdown_max_{x}"] + 2e-9
    df = pl.read_csv(out / "colocation.csv")
    assert tuple(df.columns) == COLUMNS and df.height == 1
    report = (out / "report.md").read_text()
    for heading in ("Configurations alone", "Co-located pairs", "Memory cap"):
        assert heading in report


@pytest.mark.slow
def test_its_measurements_import_into_the_store(
    quick_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = quick_run
    store = tmp_path / "profiles"
    code, text, err = run_cli(capsys, "profiles", "import", str(out / "measurements.jsonl"), "--profiles", str(store), "--json")
    assert code == 0, err
    got = json.loads(text)
    assert got["profiles"] == 3 and got["quarantined"] == [] and len(got["signatures"]) == 1
    assert sum(got["pairs"].values()) == 1
    rows = pl.read_parquet(next(store.glob("cpu-*.parquet")))
    assert set(rows["source"]) == {"measured"} and set(rows["workload"]) == {"resnet50", "ncf"}
    # a second import of the same file replaces, never duplicates, the rows
    run_cli(capsys, "profiles", "import", str(out / "measurements.jsonl"), "--profiles", str(store))
    assert pl.read_parquet(next(store.glob("cpu-*.parquet"))).height == 3


def test_import_quarantines_bad_records_and_keeps_the_rest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sig = {"gpu": "h200-141gb", "gpu_mem_mib": 143771, "driver": "580", "framework": "torch-2.11.0"}
    good = {"record": "solo", "workload": "ncf", "knobs": {"micro_batch": 8192}, "throughput": 2.4e6, "gpu_mem_mib": 1346.0,
            "sm": 0.11, "cpu_cores": 1.0, "host_mem_mib": 900.0, "signature": sig}  # fmt: skip
    bad = [
        {**good, "throughput": None},
        {**good, "gpu_mem_mib": -1.0},
        {**good, "workload": "gpt-9"},
        {**good, "knobs": {"micro_batch": 7}},
        {**good, "signature": {"gpu": "h200-141gb"}},
    ]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [good, *bad]) + "\n" + '{"record": "solo", "torn', encoding="utf-8")
    code, text, err = run_cli(capsys, "profiles", "import", str(path), "--profiles", str(tmp_path / "p"), "--json")
    assert code == 0, err
    got = json.loads(text)
    assert got["profiles"] == 1 and len(got["quarantined"]) == 5
    for why, field in zip(got["quarantined"], ("throughput", "gpu_mem_mib", "workload", "knobs.micro_batch", "signature"), strict=True):
        assert f"{path}:" in why and field in why


def test_import_of_a_missing_or_foreign_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "profiles", "import", str(tmp_path / "nope.jsonl"))
    assert code == 2 and "no such file" in err and "Traceback" not in err
    foreign = tmp_path / "x.jsonl"
    foreign.write_text('{"a": 1}\n', encoding="utf-8")
    code, _, err = run_cli(capsys, "profiles", "import", str(foreign))
    assert code == 2 and "not a measurement record" in err and len(err.strip().splitlines()) == 1


def test_gpucheck_refuses_a_cuda_device_it_cannot_see(tmp_path: Path) -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-m", "elastico_core.profiling.gpucheck", "--device", "cuda", "--gpu", "7",
                           "--out", str(tmp_path)], env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr
