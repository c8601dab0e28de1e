"""Calibration of the estimators to measured rows: held-out error before and after, and the store's order."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from elastico_core.model.hardware import HardwareSignature, gpu_model
from elastico_core.model.knobs import Knobs
from elastico_core.model.profile import Profile, Source
from elastico_core.rst.calibration import calibrate, calibrated_profiles, fit, observations
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.estimators import estimate
from elastico_core.rst.store import ProfileStore
from tests.cli_runner import run_cli

H200 = gpu_model("h200-141gb")
SIG = HardwareSignature("h200-141gb", 143771, "580.159.04", "torch-2.11.0")


def _measured(workload: str, knobs: dict[str, object], tput_factor: float, mem_factor: float) -> Profile:
    w = PAPER_WORKLOADS[workload]
    k = Knobs.of({**w.defaults.as_dict(), **knobs})
    est = estimate(w, k, H200)
    assert est is not None
    return replace(est, signature=SIG, source=Source.MEASURED, throughput=est.throughput * tput_factor,
                   resources=replace(est.resources, gpu_mem_mib=est.resources.gpu_mem_mib * mem_factor))  # fmt: skip


def _world() -> list[Profile]:
    """A GPU on which every job runs at half the estimate and AMP is worth 1.2x less than estimated;
    each workload's memory is off by its own factor."""
    rows = []
    for name, mem in (("resnet50", 1.8), ("bert", 0.6), ("transformer", 1.3)):
        for mb_amp in ({}, {"amp": True}, {"micro_batch": PAPER_WORKLOADS[name].knob("micro_batch").values[0]}):
            amp = 1 / 1.2 if mb_amp.get("amp") else 1.0
            rows.append(_measured(name, mb_amp, 0.5 * amp, mem))
    return rows


def test_calibration_recovers_shared_and_own_errors() -> None:
    report = calibrate(_world(), PAPER_WORKLOADS)
    assert report.rows == 9 and report.before["throughput"] > 1.9 and report.before["memory"] > 1.4
    # held out: the shared throughput error is learned from the other rows; each workload's memory level from
    # its own other rows (shrunk a little towards the estimate, as a ridge does)
    assert report.after["throughput"] < 1.02 and report.after["memory"] < 1.1


def test_calibrated_estimates_never_exceed_the_device_and_say_where_they_come_from() -> None:
    corr = fit(observations(_world(), PAPER_WORKLOADS)[0])
    rows = calibrated_profiles(corr, SIG, PAPER_WORKLOADS.values(), "calibrated from 9 rows")
    assert rows and all(p.source is Source.ESTIMATED and p.provenance == "calibrated from 9 rows" for p in rows)
    assert all(p.signature == SIG and p.resources.gpu_mem_mib <= H200.memory_mib for p in rows)
    assert {p.workload for p in rows} == {w.name for w in PAPER_WORKLOADS.values() if w.kind.value == "train"}
    resnet = next(p for p in rows if p.workload == "resnet50" and p.knobs == PAPER_WORKLOADS["resnet50"].defaults)
    est = estimate(PAPER_WORKLOADS["resnet50"], resnet.knobs, H200)
    assert est is not None and resnet.throughput == pytest.approx(0.5 * est.throughput, rel=0.05)


def test_the_store_prefers_measured_then_calibrated_then_interpolated(tmp_path: Path) -> None:
    store = ProfileStore.open(tmp_path)
    w = PAPER_WORKLOADS["resnet50"]
    measured = _measured("resnet50", {}, 0.5, 1.0)
    store.upsert([measured])
    other = Knobs.of({**w.defaults.as_dict(), "amp": True})
    assert store.lookup(w, other, H200, SIG).source is Source.INTERPOLATED  # type: ignore[union-attr]
    corr = fit(observations(_world(), PAPER_WORKLOADS)[0])
    store.upsert([p for p in calibrated_profiles(corr, SIG, [w], "calibrated") if p.knobs != measured.knobs])
    store = ProfileStore.open(tmp_path)
    got = store.lookup(w, other, H200, SIG)
    assert got is not None and got.source is Source.ESTIMATED and got.provenance == "calibrated"
    assert store.lookup(w, measured.knobs, H200, SIG) == measured


def test_h200_rows_of_the_first_run_calibrate_held_out(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = shared_data / "h200-profiler" / "profiles-h200.parquet"
    # the first run measured the old workload code: it exercises the parametric calibration's mechanism
    code, out, err = run_cli(capsys, "profiles", "calibrate", "--measured", str(path), "--estimator", "parametric", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["rows"] == 14
    for q in ("throughput_ratio", "memory_ratio"):
        assert got["before"][q] >= 1.0 and got["after"][q] >= 1.0 and got["after"][q] < got["before"][q]
    assert math.isclose(got["before"]["throughput_ratio"], 4.97, rel_tol=0.01)
    assert math.isclose(got["before"]["memory_ratio"], 2.33, rel_tol=0.01)


def test_calibrate_with_nothing_to_learn_from_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "profiles", "calibrate", "--profiles", str(tmp_path))
    assert code == 2 and "no measured row" in err and "Traceback" not in err
