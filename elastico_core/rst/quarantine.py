"""Row-by-row checks of profile-store rows: a bad row is set aside (quarantined), never used, never fatal.

Why rows and not files: one NaN written by a broken measurement must not take a whole GPU's profiles
down with it, and must never reach the planner (a NaN memory figure would fail every job that looks at
it, a NaN throughput would keep every job pending). Each check is one polars expression that yields the
reason a row is refused (or null), so a file of thousands of rows is checked in one pass.

This is the store's one door: rows read from a file and rows about to be written (launcher reports,
``profiles import``, ``profiles calibrate --write``, the profiler) pass the same checks. Besides types
and signs they hold physical bounds, because a finite but absurd figure does as much harm as a NaN: a
reported peak of 1e300 MiB overflowed the planner's arithmetic and failed the next job of that workload.

* memory on the GPU at most the GPU's memory (``gpu_total_mib``, itself at most ``MAX_DEVICE_MEMORY_MIB``);
* SM share and the fractional counters within 0..1, framebuffer use within the GPU's memory;
* host cores and memory at most ``MAX_CPU_CORES`` and ``MAX_HOST_MEMORY_MIB`` (a large node's);
* throughput within ``THROUGHPUT_RANGE`` per second (5e-324 and 1e300 are no measurement);
* knobs a JSON object of scalars and, for a catalog workload, one point of its grid (Table 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import polars as pl

from elastico_core.model.errors import SpecError
from elastico_core.model.hardware import MAX_DEVICE_MEMORY_MIB
from elastico_core.model.knobs import MAX_KNOBS_JSON_CHARS, TP_KNOB, TP_SIZES, Knobs, cartesian
from elastico_core.model.profile import Source
from elastico_core.model.workload import JobKind, Workload

REASON = "_quarantine_reason"
ROW = "_row"
# columns a usable row must hold (the counters, run id and dates may be empty)
REQUIRED_TEXT = ("workload", "knobs", "signature", "gpu", "unit", "source")
RESOURCES = ("sm", "gpu_mem_mib", "cpu_cores", "host_mem_mib")
STORED_SOURCES = (Source.MEASURED.value, Source.ESTIMATED.value)
FRACTION_COUNTERS = ("sm_active", "sm_occupancy", "dram_active", "tensor_active")
MAX_CPU_CORES = 4096.0
MAX_HOST_MEMORY_MIB = float(1 << 26)  # 64 TiB
# samples/s or tokens/s of a whole job: the shipped profiles span 51 .. 1.2e7; 1e-6 is one sample in 11 days
THROUGHPUT_RANGE = (1e-6, 1e9)


@dataclass(frozen=True, slots=True)
class QuarantinedRow:
    """One refused row: where it is, what it describes and why it was refused."""

    file: str
    row: int  # 0-based row number in the file
    workload: str
    knobs: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file} row {self.row} ({self.workload} {self.knobs}): {self.reason}"


def _finite(name: str) -> pl.Expr:
    col = pl.col(name)
    return (
        pl.when(col.is_null())
        .then(pl.lit(f"{name} is missing"))
        .when(~col.is_finite())
        .then(pl.format(f"{name} is not a finite number ({{}})", col))
    )


def _reasons() -> list[pl.Expr]:
    """One expression per check, each a reason string or null."""
    checks: list[pl.Expr] = [
        pl.when(pl.col(c).is_null() | (pl.col(c) == "")).then(pl.lit(f"{c} is missing")) for c in REQUIRED_TEXT
    ]
    checks.append(
        pl.when(pl.col("gpu_total_mib").is_null() | (pl.col("gpu_total_mib") <= 0)).then(
            pl.lit("gpu_total_mib is missing or not positive")
        )
    )
    checks.append(
        pl.when(pl.col("gpu_total_mib") > MAX_DEVICE_MEMORY_MIB).then(
            pl.format(f"gpu_total_mib {{}} is above {MAX_DEVICE_MEMORY_MIB} (no such GPU)", pl.col("gpu_total_mib"))
        )
    )
    checks.append(
        pl.when(
            pl.col("signature")
            != pl.format("{}|{}|{}|{}", pl.col("gpu"), pl.col("gpu_total_mib"), pl.col("driver"), pl.col("framework"))
        ).then(pl.lit("signature does not match gpu|gpu_total_mib|driver|framework"))
    )
    for name in RESOURCES:
        checks.append(_finite(name))
        checks.append(pl.when(pl.col(name) < 0).then(pl.format(f"{name} is negative ({{}})", pl.col(name))))
    checks.append(pl.when(pl.col("sm") > 1).then(pl.format("sm is above 1 ({})", pl.col("sm"))))
    checks.append(
        pl.when(pl.col("gpu_mem_mib") > pl.col("gpu_total_mib")).then(
            pl.format("gpu_mem_mib {} is above the GPU's memory ({} MiB)", pl.col("gpu_mem_mib"), pl.col("gpu_total_mib"))
        )
    )
    checks.append(pl.when(pl.col("cpu_cores") > MAX_CPU_CORES).then(
        pl.format(f"cpu_cores {{}} is above {MAX_CPU_CORES:g}", pl.col("cpu_cores"))))
    checks.append(pl.when(pl.col("host_mem_mib") > MAX_HOST_MEMORY_MIB).then(
        pl.format(f"host_mem_mib {{}} is above {MAX_HOST_MEMORY_MIB:g}", pl.col("host_mem_mib"))))
    checks.append(_finite("throughput"))
    lo, hi = THROUGHPUT_RANGE
    checks.append(
        pl.when(pl.col("throughput") <= 0).then(pl.format("throughput is not positive ({})", pl.col("throughput")))
    )
    checks.append(
        pl.when((pl.col("throughput") < lo) | (pl.col("throughput") > hi)).then(
            pl.format(f"throughput {{}} is outside {lo:g}..{hi:g} per second", pl.col("throughput"))
        )
    )
    for name in FRACTION_COUNTERS:  # unknown counters are NaN or null; a known one is a fraction
        col = pl.col(name)
        # polars orders NaN above every number: an unknown (NaN) counter must not read as "above 1"
        checks.append(pl.when(col.is_not_nan() & (col.is_infinite() | (col < 0) | (col > 1))).then(
            pl.format(f"{name} is not a fraction 0..1 ({{}})", col)))
    fb = pl.col("fb_used_mb")
    checks.append(pl.when(fb.is_not_nan() & (fb.is_infinite() | (fb < 0) | (fb > pl.col("gpu_total_mib")))).then(
        pl.format("fb_used_mb {} is outside the GPU's memory", fb)))
    checks.append(
        pl.when(~pl.col("source").is_in(STORED_SOURCES)).then(
            pl.format("source {} is not measured|estimated", pl.col("source"))
        )
    )
    return checks


def split_rows(df: pl.DataFrame, file: str) -> tuple[pl.DataFrame, tuple[QuarantinedRow, ...]]:
    """(usable rows, quarantined rows) of one file's frame, already cast to the store's schema."""
    if df.height == 0:
        return df, ()
    checked = df.with_row_index(ROW).with_columns(pl.coalesce(_reasons()).alias(REASON))
    pairs = checked.select("workload", "knobs").drop_nulls().unique()
    knobs_reason = [
        (w, k, why) for w, k in pairs.iter_rows() if k not in _grid_json(w) and (why := _knobs_problem(k, w))
    ]
    if knobs_reason:
        reasons = pl.DataFrame(knobs_reason, schema={"workload": pl.String, "knobs": pl.String, "_why": pl.String},
                           orient="row")
        checked = (
            checked.join(reasons, on=["workload", "knobs"], how="left", maintain_order="left")
            .with_columns(pl.coalesce(pl.col(REASON), pl.col("_why")).alias(REASON))
            .drop("_why")
        )
    bad = checked.filter(pl.col(REASON).is_not_null())
    good = checked.filter(pl.col(REASON).is_null()).drop(ROW, REASON)
    rows = tuple(
        QuarantinedRow(file, int(r[ROW]), _clip(r["workload"]), _clip(r["knobs"]), _clip(r[REASON], 300))
        for r in bad.select(ROW, "workload", "knobs", REASON).iter_rows(named=True)
    )
    return good, rows


def _clip(value: object, limit: int = 120) -> str:
    """A value as a log line may quote it: a 200,000-character knobs text is evidence, not a message."""
    text = str(value or "?")
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def _knobs_problem(text: str, workload: str) -> str | None:
    """Why a row's knobs are unusable: not a JSON object of scalars, or off a catalog workload's grid."""
    if len(text) > MAX_KNOBS_JSON_CHARS:  # refused before parsing (and never kept in the cache below)
        return f"knobs: a document of {len(text):,} characters (at most {MAX_KNOBS_JSON_CHARS:,})"
    return _knobs_problem_cached(text, workload)


@lru_cache(maxsize=4096)
def _knobs_problem_cached(text: str, workload: str) -> str | None:
    try:
        knobs = Knobs.from_json(text)
    except SpecError as exc:
        return f"knobs: {exc}"
    known = _catalog().get(workload)
    if known is not None and (off := known.off_grid(knobs)) is not None:
        return f"knobs: {off}"
    return None


@lru_cache(maxsize=64)
def _grid_json(workload: str) -> frozenset[str]:
    """Every point of a catalog workload's space in canonical JSON (the store's key): the fast path of the
    grid check (a row written by the store is one of these; anything else is parsed and explained)."""
    known = _catalog().get(workload)
    if known is None:
        return frozenset()
    points = [k.to_json() for k in cartesian(known.knobs)]
    if known.kind is JobKind.INFER:
        points += [k.with_(**{TP_KNOB: tp}).to_json() for k in cartesian(known.knobs) for tp in TP_SIZES[1:]]
    return frozenset(points)


def _catalog() -> Mapping[str, Workload]:
    from elastico_core.rst.catalog import PAPER_WORKLOADS  # the catalog imports the estimators: load lazily

    return PAPER_WORKLOADS
