"""Row-by-row checks of profile-store rows: a bad row is set aside (quarantined), never used, never fatal.

Why rows and not files: one NaN written by a broken measurement must not take a whole GPU's profiles
down with it, and must never reach the planner (a NaN memory figure would fail every job that looks at
it, a NaN throughput would keep every job pending). Each check is one polars expression that yields the
reason a row is refused (or null), so a file of thousands of rows is checked in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from elastico_core.model.errors import SpecError
from elastico_core.model.knobs import Knobs
from elastico_core.model.profile import Source

REASON = "_quarantine_reason"
ROW = "_row"
# columns a usable row must hold (the counters, run id and dates may be empty)
REQUIRED_TEXT = ("workload", "knobs", "signature", "gpu", "unit", "source")
RESOURCES = ("sm", "gpu_mem_mib", "cpu_cores", "host_mem_mib")
STORED_SOURCES = (Source.MEASURED.value, Source.ESTIMATED.value)


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
    for name in RESOURCES:
        checks.append(_finite(name))
        checks.append(pl.when(pl.col(name) < 0).then(pl.format(f"{name} is negative ({{}})", pl.col(name))))
    checks.append(pl.when(pl.col("sm") > 1).then(pl.format("sm is above 1 ({})", pl.col("sm"))))
    checks.append(_finite("throughput"))
    checks.append(
        pl.when(pl.col("throughput") <= 0).then(pl.format("throughput is not positive ({})", pl.col("throughput")))
    )
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
    knobs_reason = {k: why for k in checked["knobs"].drop_nulls().unique().to_list() if (why := _knobs_problem(k))}
    if knobs_reason:
        checked = checked.with_columns(
            pl.coalesce(pl.col(REASON), pl.col("knobs").replace_strict(knobs_reason, default=None)).alias(REASON)
        )
    bad = checked.filter(pl.col(REASON).is_not_null())
    good = checked.filter(pl.col(REASON).is_null()).drop(ROW, REASON)
    rows = tuple(
        QuarantinedRow(file, int(r[ROW]), str(r["workload"] or "?"), str(r["knobs"] or "?"), str(r[REASON]))
        for r in bad.select(ROW, "workload", "knobs", REASON).iter_rows(named=True)
    )
    return good, rows


def _knobs_problem(text: str) -> str | None:
    try:
        Knobs.from_json(text)
    except SpecError as exc:
        return f"knobs: {exc}"
    return None
