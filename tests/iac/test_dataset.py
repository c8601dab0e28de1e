"""The co-location dataset contract: good rows load, bad rows name their row and column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from elastico_core.iac.dataset import REQUIRED_COLUMNS, concat, read_dataset, validate, write_dataset
from elastico_core.iac.features import FEATURE_NAMES
from elastico_core.model.errors import SpecError


def row(**over: object) -> dict[str, object]:
    base: dict[str, object] = {
        "gpu": "a100-40gb",
        "workload_a": "resnet50",
        "kind_a": "train",
        "knobs_a": '{"micro_batch": 128, "amp": true}',
        "params_a": 25_557_032,
        "solo_tput_a": 1000.0,
        "colo_tput_a": 800.0,
        "workload_b": "qwen-1.7b",
        "kind_b": "infer",
        "knobs_b": '{"prefix_caching": true, "max_model_len": 8192}',
        "params_b": 2_031_739_904,
        "solo_tput_b": 700.0,
        "colo_tput_b": 350.0,
    }
    base.update(over)
    return base


def frame(*rows: dict[str, object]) -> pl.DataFrame:
    return pl.DataFrame(list(rows))


def test_two_samples_per_pair_with_labels_solo_over_colo() -> None:
    ds = validate(frame(row(), row(workload_b="bert", kind_b="train", knobs_b="{}", params_b=3e8)))
    s = ds.samples()
    assert s.X.shape == (4, len(FEATURE_NAMES))
    np.testing.assert_allclose(s.y, [1.25, 1.25, 2.0, 2.0])
    assert list(s.pair_type) == ["T+I", "T+T", "T+I", "T+T"]
    assert list(s.group) == ["qwen-1.7b|resnet50", "bert|resnet50"] * 2
    assert not s.synthetic.any()


def test_counters_are_optional_and_missing_ones_are_flagged() -> None:
    ds = validate(frame(row(sm_active_a=0.9, dram_active_a=0.4)))
    x = ds.samples().X
    names = list(FEATURE_NAMES)
    assert x[0, names.index("a_sm_active")] == 0.9
    assert np.isnan(x[0, names.index("a_sm_occupancy")])
    assert x[0, names.index("missing_a_sm_active")] == 0.0
    assert x[0, names.index("missing_a_sm_occupancy")] == 1.0
    assert x[0, names.index("missing_b_sm_active")] == 1.0


def test_catalog_inference_rows_get_their_sequence_lengths() -> None:
    x = validate(frame(row())).samples().X
    names = list(FEATURE_NAMES)
    assert x[0, names.index("b_isl")] > 0 and x[0, names.index("b_osl")] > 0
    assert x[0, names.index("b_prefix_ratio")] == pytest.approx(0.5)  # Qwen's prompt sharing, prefix caching on
    assert x[0, names.index("a_micro_batch")] == 128 and x[0, names.index("a_amp")] == 1.0
    assert x[0, names.index("a_log_params")] == pytest.approx(np.log10(25_557_032))


def test_did_not_fit_rows_are_kept_but_excluded_from_slowdown_samples() -> None:
    ds = validate(frame(row(), row(colo_tput_a=0.0, colo_tput_b=0.0)))
    assert ds.rows == 2 and ds.excluded_infeasible == 1
    assert len(ds.samples()) == 2


def test_suspect_rows_are_kept_in_the_file_but_skipped_by_training() -> None:
    ds = validate(frame(row(), row(colo_tput_a=1100.0, source="suspect"), row(source="measured")))
    assert ds.rows == 3 and ds.suspect_rows == 1 and len(ds.samples()) == 4  # two samples per usable row
    assert list(ds.usable_mask()) == [True, False, True]


def test_a_faster_colocated_run_is_clipped_to_no_slowdown() -> None:
    s = validate(frame(row(colo_tput_a=1010.0))).samples()
    assert s.y[0] == 1.0


def test_unknown_gpu_needs_its_memory() -> None:
    with pytest.raises(SpecError, match="row 1: gpu: unknown GPU type 'tpu'"):
        validate(frame(row(gpu="tpu")))
    ds = validate(frame(row(gpu="tpu", gpu_mem_mib=16384)))
    assert ds.frame["gpu_mem_mib"][0] == 16384


BAD = [
    ("solo-zero", {"solo_tput_a": 0.0}, "row 2: solo_tput_a: isolated throughput must be > 0"),
    ("solo-negative", {"solo_tput_b": -3.0}, "row 2: solo_tput_b: isolated throughput must be > 0"),
    ("colo-negative", {"colo_tput_b": -1.0}, "row 2: colo_tput_b: co-located throughput must be >= 0"),
    ("kind", {"kind_b": "serve"}, "row 2: kind_b: unknown kind 'serve'"),
    ("params", {"params_a": 0}, "row 2: params_a: must be a parameter count > 0"),
    ("knobs-json", {"knobs_a": "{mb: 3"}, "row 2: knobs_a: knobs are not valid JSON"),
    ("knobs-list", {"knobs_b": "[1, 2]"}, "row 2: knobs_b: knobs must be a JSON object"),
    ("one-sided", {"colo_tput_a": 0.0}, "row 2: colo_tput_a: 0 on one side only"),
    ("counter-range", {"sm_active_b": 1.5}, "row 2: sm_active_b: must be a fraction in 0..1"),
    ("source", {"source": "guessed"}, "row 2: source: unknown source 'guessed'"),
    ("empty-workload", {"workload_a": " "}, "row 2: workload_a: must not be empty"),
]


@pytest.mark.parametrize(("over", "message"), [(o, m) for _, o, m in BAD], ids=[i for i, _, _ in BAD])
def test_bad_values_name_row_and_column(over: dict[str, object], message: str) -> None:
    good = row(source="measured", sm_active_b=0.5)
    with pytest.raises(SpecError) as err:
        validate(frame(good, {**good, **over}), origin="pairs.csv")
    assert str(err.value).startswith("pairs.csv: ")
    assert message in str(err.value)


def test_missing_columns_are_named() -> None:
    df = frame(row()).drop("solo_tput_b", "kind_a")
    with pytest.raises(SpecError, match=r"missing required column\(s\) \['kind_a', 'solo_tput_b'\]"):
        validate(df, origin="pairs.csv")


def test_csv_cells_that_are_not_numbers_name_row_and_column(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    frame(row(), row()).with_columns(pl.Series("solo_tput_a", ["1000", "fast"])).write_csv(path)
    with pytest.raises(SpecError, match=r"pairs.csv: row 2: solo_tput_a: not a number: 'fast'"):
        read_dataset(path)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_round_trip_through_csv_and_parquet(tmp_path: Path, suffix: str) -> None:
    ds = validate(frame(row(sm_active_a=0.7), row(colo_tput_a=0.0, colo_tput_b=0.0)))
    path = write_dataset(ds, tmp_path / f"pairs{suffix}")
    back = read_dataset(path)
    assert back.frame.columns == ds.frame.columns
    assert back.rows == 2 and back.excluded_infeasible == 1
    np.testing.assert_allclose(back.samples().X, ds.samples().X, equal_nan=True)
    assert back.digest() == ds.digest()


def test_unsupported_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "pairs.xlsx").write_text("x")
    with pytest.raises(SpecError, match=r"a co-location dataset is a \.csv or \.parquet file"):
        read_dataset(tmp_path / "pairs.xlsx")
    with pytest.raises(SpecError, match="no such file"):
        read_dataset(tmp_path / "absent.csv")


def test_concat_keeps_every_row() -> None:
    a, b = validate(frame(row())), validate(frame(row(), row()))
    assert concat([a, b]).rows == 3
    assert set(REQUIRED_COLUMNS) <= set(concat([a, b]).frame.columns)
