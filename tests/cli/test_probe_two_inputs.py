"""The second probe's smaller items, each a one-line error (or a quarantine line) now, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.cli_runner import run_cli as run
from tests.conftest import REPO

EXAMPLES = REPO / "examples"
SIG = {"gpu": "a100-40gb", "gpu_mem_mib": 40960, "driver": "550", "framework": "torch-2.8"}
GOOD = {"record": "solo", "workload": "bert", "knobs": {"micro_batch": 64}, "sm": 0.5, "gpu_mem_mib": 20000.0,
        "cpu_cores": 4, "host_mem_mib": 16384, "throughput": 120.0, "host": "h", "signature": SIG}


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    out = tmp_path / "profiles"
    out.mkdir()
    for f in (REPO / "profiles").glob("*.parquet"):
        shutil.copy(f, out / f.name)
    return out


def _import(capsys: pytest.CaptureFixture[str], tmp_path: Path, profiles: Path, lines: list[str]) -> tuple[int, dict[str, Any], str]:
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")
    code, out, err = run(capsys, "profiles", "import", str(path), "--profiles", str(profiles), "--json")
    return code, (json.loads(out) if code == 0 else {}), err


@pytest.mark.parametrize(
    "bad",
    [
        json.dumps({**GOOD, "knobs": {"micro_batch": [64]}}),  # a nested knob value: TypeError before
        json.dumps({**GOOD, "signature": {**SIG, "gpu_mem_mib": 2**70}}),  # Int64 overflow at the write before
        json.dumps({**GOOD, "throughput": "abc"}),
        json.dumps({**GOOD, "knobs": {"micro_batch": 64}}).replace('"throughput": 120.0', '"throughput": 1e999'),
        json.dumps({**GOOD, "gpu_mem_mib": 1e300}),
        json.dumps({**GOOD, "throughput": 5e-324}),
    ],
    ids=["nested knobs", "2**70 MiB", "abc", "1e999", "1e300 MiB", "denormal"],
)
def test_profiles_import_quarantines_what_it_cannot_use(
    bad: str, tmp_path: Path, profiles: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, got, err = _import(capsys, tmp_path, profiles, [bad, json.dumps(GOOD)])
    assert code == 0 and "Traceback" not in err, err
    assert got["profiles"] == 1 and len(got["quarantined"]) == 1, got


def test_deep_json_is_one_line(tmp_path: Path, profiles: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _import(capsys, tmp_path, profiles, [json.dumps(GOOD), "[" * 100_000 + "]" * 100_000])
    assert code == 2 and err.count("\n") == 1 and "not a JSON object" in err and ":2" in err


def test_a_bad_pair_writes_nothing(tmp_path: Path, profiles: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The solo row used to be written before the next bad pair crashed the import."""
    before = {p.name: p.read_bytes() for p in profiles.glob("*.parquet")}
    bad_pair = {"record": "pair", "row": {"gpu": "a100-40gb", "workload_a": "bert", "kind_a": "train", "knobs_a": "{}",
                                          "params_a": 1, "solo_tput_a": 1.0, "colo_tput_a": [1],
                                          "workload_b": "ncf", "kind_b": "train", "knobs_b": "{}", "params_b": 1,
                                          "solo_tput_b": 1.0, "colo_tput_b": 1.0}}  # fmt: skip
    code, got, err = _import(capsys, tmp_path, profiles, [json.dumps(GOOD), json.dumps(bad_pair)])
    assert code == 0 and got["profiles"] == 1 and got["pairs"] == {} and len(got["quarantined"]) == 1, (got, err)
    dataset = profiles / "colocation"
    assert not dataset.exists() or not any(dataset.iterdir())
    # and a damaged dataset file fails the whole import before the solo row is written
    dataset.mkdir(exist_ok=True)
    (dataset / "a100-40gb_40960_any_any.parquet").write_text("not parquet")
    good_pair = {"record": "pair", "row": {**bad_pair["row"], "colo_tput_a": 0.5, "gpu_mem_mib": 40960}}  # type: ignore[dict-item]
    for p in profiles.glob("*.parquet"):  # back to the store before the first import
        if p.name in before:
            p.write_bytes(before[p.name])
        else:
            p.unlink()
    code, _, err = _import(capsys, tmp_path, profiles, [json.dumps(GOOD), json.dumps(good_pair)])
    assert code == 2 and "co-location contract" in err
    assert {p.name: p.read_bytes() for p in profiles.glob("*.parquet")} == before


def test_a_long_line_is_refused_without_being_held(
    tmp_path: Path, profiles: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from elastico_core.profiling import records

    monkeypatch.setattr(records, "MAX_RECORD_CHARS", 1000)
    code, _, err = _import(capsys, tmp_path, profiles, [json.dumps(GOOD), "x" * 50_000])
    assert code == 2 and "longer than 1,000 characters" in err and ":2" in err


def test_calibrate_write_survives_absurd_measured_rows(tmp_path: Path, profiles: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """5e-324 crashed it; 1e300/1e-300 rows made it write 762 absurd estimates (bert at 0 MiB)."""
    rows = [json.dumps({**GOOD, "throughput": t}) for t in (5e-324, 1e300, 1e-300)]
    rows += [json.dumps({**GOOD, "knobs": {"micro_batch": mb}, "gpu_mem_mib": 1e-300}) for mb in (32, 128)]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(rows) + "\n")
    code, out, err = run(capsys, "profiles", "calibrate", "--measured", str(path), "--profiles", str(profiles), "--write", "--estimator", "parametric", "--json")
    assert code == 2 and "no measured row" in err and "Traceback" not in err  # all five refused: nothing to fit
    sane = rows[:0] + [json.dumps({**GOOD, "knobs": {"micro_batch": mb}, "throughput": t, "gpu_mem_mib": m})
                       for mb, t, m in ((32, 90.0, 26000.0), (64, 140.0, 30000.0), (128, 160.0, 36000.0))]  # fmt: skip
    path.write_text("\n".join([*rows, *sane]) + "\n")
    code, out, err = run(capsys, "profiles", "calibrate", "--measured", str(path), "--profiles", str(profiles), "--write", "--estimator", "parametric", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["rows"] == 3 and len(got["quarantined"]) == 3 and len(got["skipped"]) == 2 and got["written"] > 0
    import polars as pl

    from elastico_core.rst.store import ProfileStore

    written = ProfileStore.open(profiles).frame().filter(pl.col("signature") == "a100-40gb|40960|550|torch-2.8",
                                                         pl.col("provenance").str.starts_with("calibrated"))
    assert written.height == got["written"] and written["gpu_mem_mib"].min() > 1000  # no estimate at 0 MiB


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("jobs:\n  - {id: a, workload: bert, priority: 9223372036854775808}\n", "priority"),
        ("jobs:\n  - {id: a, workload: bert, gpus: true}\n", "boolean"),
        ("jobs:\n  - {id: a, workload: bert, floor: 1, floor: 2}\n", "duplicate key 'floor'"),
        ("jobs:\n  - {id: a, workload: bert, labels: {team: " + "x" * 10_000_000 + "}}\n", "at most 1024 characters"),
        ("workloads:\n  - {name: mine, kind: train, params: 1000, knobs: {micro_batch: [8]},"
         " shape: {memory_gib: [2, 4], gflops_per_sample: abc}}\njobs:\n  - {id: a, workload: mine}\n", "gflops_per_sample"),
    ],
    ids=["priority 2**63", "boolean count", "duplicate key", "10 MB label", "shape abc"],
)
def test_job_files_refuse_it_at_submit(doc: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(doc)
    code, _, err = run(capsys, "jobs", "submit", "--spec", str(path), "--state", f"sqlite:///{tmp_path / 's.db'}")
    assert code == 2 and err.count("\n") == 1 and message in err and "Traceback" not in err, err


@pytest.mark.parametrize(("option", "value"), [("--lease-ttl", "inf"), ("--interval", "0"), ("--interval", "nan"),
                                               ("--start-deadline", "1e300")])
def test_controller_options_are_bounded(option: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "controller", "run", "--once", "--cluster", str(EXAMPLES / "cluster.yaml"),
                       "--state", f"sqlite:///{tmp_path / 's.db'}", option, value)
    assert code == 2 and err.count("\n") == 1 and option in err, err


def test_simulate_refuses_a_submit_time_of_1e12(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time_s,duration_s,num_gpus,kind\nj1,0,60,1,train\nj2,1e12,60,1,train\n")
    code, _, err = run(capsys, "simulate", "--trace", str(trace), "--gpus", "8", "--policies", "elastico")
    assert code == 2 and err.count("\n") == 1 and "submit_time_s" in err and "ten years" in err, err
