"""The profile store: keyed rows, measured-over-estimated, nearest neighbour, invalidation, bad files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from elastico_core.model import KNOWN_GPUS, HardwareSignature, Knobs, SpecError
from elastico_core.model.profile import Source
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.estimators import estimate
from elastico_core.rst.store import ProfileStore, read_profile_file

A100 = KNOWN_GPUS["a100-40gb"]
H100 = KNOWN_GPUS["h100-80gb"]
RESNET = PAPER_WORKLOADS["resnet50"]
K128 = Knobs.of({"micro_batch": 128, "checkpointing": False, "amp": False, "dp": 1})
SIG = HardwareSignature("a100-40gb", 40960, "550.54", "torch-2.8")


def _measured(knobs: Knobs, tput: float, sig: HardwareSignature = SIG):  # type: ignore[no-untyped-def]
    est = estimate(RESNET, knobs, A100)
    assert est is not None
    return replace(est, signature=sig, throughput=tput, source=Source.MEASURED, mlflow_run_id="run-1", measured_at="2026-12-01T00:00:00+00:00")


def test_shipped_store_covers_every_configuration(store: ProfileStore) -> None:
    df = store.frame()
    assert set(df["source"].unique()) == {"estimated", "measured"}
    # the only measured rows shipped are the H200's (a gpucheck run), beside the calibrated estimates for the rest
    measured = df.filter(pl.col("source") == "measured")
    assert set(measured["signature"]) == {"h200-141gb|143771|580.159.04|torch-2.11.0"} and measured.height == 13
    calibrated = df.filter(pl.col("provenance").fill_null("").str.starts_with("calibrated"))
    assert set(calibrated["signature"]) == set(measured["signature"]) and calibrated.height > 500
    assert calibrated.join(measured, on=["workload", "knobs", "signature"]).height == 0  # never over a measured row
    assert df.filter(pl.col("gpu") == "a100-40gb").height > 1000
    assert not store.problems


def test_upsert_replaces_same_key_and_measured_wins(empty_store: ProfileStore) -> None:
    empty_store.upsert([_measured(K128, 100.0)])
    empty_store.upsert([_measured(K128, 123.0)])
    assert empty_store.frame().height == 1
    got = empty_store.lookup(RESNET, K128, A100, SIG)
    assert got is not None and got.source is Source.MEASURED and got.throughput == 123.0


def test_unseen_configuration_is_interpolated_from_the_nearest_measured(empty_store: ProfileStore) -> None:
    empty_store.upsert([_measured(K128, 500.0)])
    k256 = K128.with_(micro_batch=256)
    got = empty_store.lookup(RESNET, k256, A100)
    est128, est256 = estimate(RESNET, K128, A100), estimate(RESNET, k256, A100)
    assert got is not None and est128 and est256
    assert got.source is Source.INTERPOLATED and got.mlflow_run_id == "run-1"
    assert got.throughput == pytest.approx(500.0 * est256.throughput / est128.throughput)


def test_estimator_fills_in_without_rows(empty_store: ProfileStore) -> None:
    got = empty_store.lookup(RESNET, K128, A100)
    assert got is not None and got.source is Source.ESTIMATED


def test_invalidate_one_signature_only(empty_store: ProfileStore) -> None:
    other = HardwareSignature("h100-80gb", 81559, "550.54", "torch-2.8")
    empty_store.upsert([_measured(K128, 100.0), _measured(K128, 300.0, other)])
    files_before = {p.name for p in empty_store.files()}
    assert empty_store.invalidate(SIG) == 1
    assert {p.name for p in empty_store.files()} == files_before - {f"{SIG.slug()}.parquet"}
    assert empty_store.lookup(RESNET, K128, A100, SIG).source is Source.ESTIMATED  # type: ignore[union-attr]
    assert empty_store.lookup(RESNET, K128, H100).throughput == 300.0  # type: ignore[union-attr]


def test_corrupted_file_is_named_and_skipped(empty_store: ProfileStore, tmp_path: Path) -> None:
    empty_store.upsert([_measured(K128, 100.0)])
    bad = empty_store.root / "garbage.parquet"
    bad.write_bytes(b"PAR1 not really")
    wrong = empty_store.root / "wrong-schema.parquet"
    pl.DataFrame({"workload": ["x"]}).write_parquet(wrong)
    empty_store._invalidate_cache()
    df = empty_store.frame()
    assert df.height == 1
    messages = sorted(str(p) for p in empty_store.problems)
    assert any("garbage.parquet" in m and "not a readable parquet" in m for m in messages)
    assert any("wrong-schema.parquet" in m and "missing columns" in m for m in messages)
    with pytest.raises(SpecError, match=r"wrong-schema\.parquet"):
        read_profile_file(wrong)


def test_invalid_rows_are_quarantined_and_the_rest_used(empty_store: ProfileStore) -> None:
    k64 = K128.with_(micro_batch=64)
    empty_store.upsert([_measured(K128, 100.0), _measured(k64, 80.0)])
    path = empty_store.files()[0]
    df = pl.read_parquet(path)
    df = df.with_columns(pl.when(pl.col("knobs") == K128.to_json()).then(float("nan")).otherwise(pl.col("gpu_mem_mib"))
                         .alias("gpu_mem_mib"))
    df.write_parquet(path)
    empty_store._invalidate_cache()
    assert read_profile_file(path).height == 1
    (bad,) = empty_store.quarantined()
    assert bad.knobs == K128.to_json() and "gpu_mem_mib is not a finite number" in bad.reason
    assert any("1 rows quarantined" in str(p) and path.name in str(p) for p in empty_store.problems)
    got = empty_store.lookup(RESNET, K128, A100, SIG)  # the estimator (via the measured neighbour) stands in
    assert got is not None and got.source is Source.INTERPOLATED and got.resources.gpu_mem_mib > 0
    # a later write keeps the quarantined row in the file (evidence), and it stays out of lookups
    empty_store.upsert([_measured(K128.with_(micro_batch=32), 50.0)])
    assert pl.read_parquet(path).height == 3 and len(empty_store.quarantined()) == 1
