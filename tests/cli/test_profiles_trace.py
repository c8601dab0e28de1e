"""``elastico profiles trace``, the origin of each row in ``profiles show``, and the traced calibration."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from elastico_core.model.hardware import KNOWN_GPUS
from elastico_core.model.knobs import Knobs
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.traced_estimator import TracedEstimator
from tests.cli_runner import run_cli

REPO = Path(__file__).resolve().parents[2]
H200_RUN = REPO / "profiles" / "gpucheck" / "h200-141gb-2026-12-04" / "measurements.jsonl"


def test_trace_caches_each_configuration_and_traces_only_what_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "profiles", "trace", "--workload", "ncf", "--scale", "tiny", "--profiles", str(tmp_path), "--json")
    assert code == 0, err
    got = json.loads(out)
    rows = got["configurations"]
    assert got["traced"] == len(rows) == 9 * 2 * 2 and got["cached"] == 0  # micro-batch x checkpointing x AMP
    first = rows[0]
    for part in ("weights_mib", "gradients_mib", "optimizer_mib", "activations_mib", "peak_allocated_mib", "reserved_mib"):
        assert first[part] >= 0
    assert first["gflops_per_sample"] > 0 and first["source"] == "traced" and len(first["digest"]) == 16
    code, out, _ = run_cli(capsys, "profiles", "trace", "--workload", "ncf", "--scale", "tiny", "--profiles", str(tmp_path), "--json")
    again = json.loads(out)
    assert code == 0 and again["traced"] == 0 and again["cached"] == 36
    assert {r["status"] for r in again["configurations"]} == {"cached"}


def test_trace_of_an_unknown_workload_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "profiles", "trace", "--workload", "resnet5", "--profiles", str(tmp_path))
    assert code == 2 and "unknown workload 'resnet5'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_show_says_where_each_rows_numbers_came_from(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "profiles", "show", "--gpu", "h200-141gb", "--source", "measured", "--json", "--limit", "3")
    assert code == 0, err
    assert all(r["origin"].startswith("measured by gpucheck") for r in json.loads(out))
    code, out, _ = run_cli(capsys, "profiles", "show", "--gpu", "a100-40gb", "--json", "--limit", "3")
    assert all(r["origin"] for r in json.loads(out))


# ---- what the traced estimates show against the 13 H200 rows (docs/profiling.md) -----------------------------


def _measured() -> list[dict[str, object]]:
    return [r for r in map(json.loads, H200_RUN.read_text().splitlines()) if r.get("record") == "solo"]


def test_traced_estimates_against_the_h200_rows(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "profiles", "calibrate", "--measured", str(H200_RUN), "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["estimator"] == "traced" and got["rows"] == 13 and got["skipped"] == []
    assert got["before"]["memory_ratio"] <= 1.3  # traced, not fitted to these rows
    assert not [r for r in got["per_row"] if r["memory_traced_mib"] < 0.9 * r["memory_measured_mib"]]
    assert got["before"]["throughput_ratio"] <= 1.5
    assert got["after"]["throughput_ratio"] < got["before"]["throughput_ratio"]


KNOB_EFFECTS = [  # (workload, knobs on, knobs off, measured memory ratio on the H200)
    ("resnet50", {"micro_batch": 256, "amp": True}, {"micro_batch": 256, "amp": False}, 0.46),
    ("bert", {"micro_batch": 128, "amp": True}, {"micro_batch": 128}, 0.70),
    ("bert", {"micro_batch": 128, "checkpointing": True}, {"micro_batch": 128}, 0.33),
    ("resnet50", {"micro_batch": 512}, {"micro_batch": 256}, 1.84),
    ("bert", {"micro_batch": 128}, {"micro_batch": 32}, 2.81),
]


@pytest.mark.parametrize(("workload", "on", "off", "measured"), KNOB_EFFECTS, ids=lambda x: str(x))
def test_traced_knob_effects_on_memory_within_15_percent(workload: str, on: dict, off: dict, measured: float) -> None:  # type: ignore[type-arg]
    w, gpu = PAPER_WORKLOADS[workload], KNOWN_GPUS["h200-141gb"]
    est = TracedEstimator.open(REPO / "profiles")
    base = {"checkpointing": False, "amp": False, "dp": 1}
    a, b = (est(w, Knobs.of({**base, **k}), gpu) for k in (on, off))
    assert a is not None and b is not None and a.provenance.startswith("traced")
    ratio = a.resources.gpu_mem_mib / b.resources.gpu_mem_mib
    assert abs(math.log(ratio / measured)) <= math.log(1.15), (ratio, measured)


def test_a_changed_digest_is_traced_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ("profiles", "trace", "--workload", "ppo", "--scale", "tiny", "--profiles", str(tmp_path), "--json")
    assert run_cli(capsys, *args)[0] == 0
    path = tmp_path / "traced" / "training.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    first["digest"] = "0" * 16  # as if the workload's code had changed since
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    code, out, _ = run_cli(capsys, *args)
    got = json.loads(out)
    assert code == 0 and got["traced"] == 1 and got["cached"] == len(lines) - 1


def test_the_shipped_traces_are_current() -> None:
    """The traces in profiles/traced match the code: after a change to a workload, run 'elastico profiles trace'."""
    from elastico_core.rst.traced import TracedCache
    from elastico_core.workloads.scale import Scale
    from elastico_core.workloads.tracing.catalogue import is_current, jobs

    cache, digests = TracedCache(REPO / "profiles"), {}  # type: ignore[var-annotated]
    stale = [j.label for j in jobs(PAPER_WORKLOADS.values()) if not is_current(j, cache, Scale.FULL, digests)]
    assert stale == [] and cache.problems == []


CUSTOM_JOBS = """workloads:
  - name: two-tower
    kind: train
    params: 100000
    model: tests.workloads.custom_model:build
    knobs: {micro_batch: [16, 32], checkpointing: [false, true], amp: [false]}
    shape: {memory_gib: [1, 2]}
jobs:
  - {id: t-1, workload: two-tower}
"""


def test_a_custom_workload_with_a_model_builder_is_traced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(CUSTOM_JOBS)
    code, out, err = run_cli(capsys, "profiles", "trace", "--jobs", str(jobs), "--workload", "two-tower", "--scale", "tiny",
                             "--profiles", str(tmp_path), "--json")  # fmt: skip
    assert code == 0, err
    rows = json.loads(out)["configurations"]
    assert [(r["micro_batch"], r["checkpointing"]) for r in rows] == [(16, False), (16, True), (32, False), (32, True)]
    jobs.write_text(CUSTOM_JOBS.replace("tests.workloads.custom_model:build", "not a builder"))
    code, _, err = run_cli(capsys, "profiles", "trace", "--jobs", str(jobs), "--profiles", str(tmp_path))
    assert code == 2 and "model" in err and "Traceback" not in err
    jobs.write_text(CUSTOM_JOBS.replace("custom_model:build", "custom_model:missing"))
    code, _, err = run_cli(capsys, "profiles", "trace", "--jobs", str(jobs), "--workload", "two-tower", "--scale", "tiny",
                           "--profiles", str(tmp_path))  # fmt: skip
    assert code == 2 and "has no function 'missing'" in err and len(err.strip().splitlines()) == 1


def test_bench_estimates_prints_both_estimators(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "bench", "estimates", "--rounds", "1")
    got = json.loads(out)
    assert code == 0, err
    assert got["configurations"] > 1000 and got["traced_configurations"] == 196
    assert got["us_per_estimate"]["parametric"] > 0 and got["us_per_estimate"]["traced"] > 0
