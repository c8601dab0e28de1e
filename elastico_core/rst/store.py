"""The profile store: one parquet file per hardware signature under ``profiles/``, read with polars.

Lookup order for a (workload, knobs, GPU) triple:
1. a measured row whose signature matches the node's exactly, then any measured row for that GPU model;
2. a calibrated estimate (``elastico profiles calibrate --write``: the estimators corrected by the
   measured rows of a signature; ``provenance`` says from which), the node's signature first;
3. nearest-neighbour interpolation (§3.1.2) from measured rows of the same workload and GPU model: the
   neighbour closest in normalised resource-vector (l2) distance, its throughput scaled by the
   estimators' ratio between the two configurations;
4. an estimated row, and finally the estimator itself.
The estimator is ``rst.traced_estimator``'s unless one is given: traced figures (``<root>/traced``,
``elastico profiles trace``) where the configuration has a trace, the parametric estimate elsewhere.
Measured rows always win over estimates once they exist.

Nothing in the store can stop planning: only regular files of at most ``MAX_FILE_BYTES`` are read (a
FIFO named ``*.parquet`` would block the reader forever, a directory would be read as a dataset), a file
that cannot be read is skipped with a note, and every row passes ``rst.quarantine``'s checks on the way
in (``upsert``) and on the way out (``frame``). A write over a damaged file moves that file aside
(``*.parquet.corrupt-<time>``, kept as evidence) instead of failing each time a report arrives.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from elastico_core.model.errors import SpecError
from elastico_core.model.hardware import GpuModel, HardwareSignature
from elastico_core.model.knobs import Knobs
from elastico_core.model.profile import Counters, Profile, Source
from elastico_core.model.resources import ResourceVector
from elastico_core.model.workload import Workload
from elastico_core.rst.quarantine import QuarantinedRow, split_rows

Estimator = Callable[[Workload, Knobs, GpuModel], Profile | None]

SCHEMA_VERSION = 1
SCHEMA: dict[str, type[pl.DataType] | pl.DataType] = {
    "workload": pl.String,
    "knobs": pl.String,  # canonical JSON object
    "signature": pl.String,  # gpu|mem|driver|framework
    "gpu": pl.String,
    "gpu_total_mib": pl.Int64,
    "driver": pl.String,
    "framework": pl.String,
    "sm": pl.Float64,
    "gpu_mem_mib": pl.Float64,
    "cpu_cores": pl.Float64,
    "host_mem_mib": pl.Float64,
    "throughput": pl.Float64,
    "unit": pl.String,
    "source": pl.String,
    "sm_active": pl.Float64,
    "sm_occupancy": pl.Float64,
    "dram_active": pl.Float64,
    "fb_used_mb": pl.Float64,
    "tensor_active": pl.Float64,
    "mlflow_run_id": pl.String,
    "measured_at": pl.String,
    "measured_on": pl.String,
    "schema_version": pl.Int64,
    "provenance": pl.String,  # optional (files written before it read as empty)
}
OPTIONAL_COLUMNS = ("provenance",)
KEY = ("workload", "knobs", "signature")
MAX_FILE_BYTES = 256 << 20  # the shipped files are ~100 kB for 1,344 rows; a million rows fit well below


def profile_row(p: Profile, *, measured_on: str = "") -> dict[str, object]:
    r, c = p.resources, p.counters
    return {
        "workload": p.workload,
        "knobs": p.knobs.to_json(),
        "signature": p.signature.key,
        "gpu": p.signature.gpu,
        "gpu_total_mib": p.signature.gpu_mem_mib,
        "driver": p.signature.driver,
        "framework": p.signature.framework,
        "sm": r.sm,
        "gpu_mem_mib": r.gpu_mem_mib,
        "cpu_cores": r.cpu_cores,
        "host_mem_mib": r.host_mem_mib,
        "throughput": p.throughput,
        "unit": p.unit,
        "source": p.source.value,
        "sm_active": c.sm_active,
        "sm_occupancy": c.sm_occupancy,
        "dram_active": c.dram_active,
        "fb_used_mb": c.fb_used_mb,
        "tensor_active": c.tensor_active,
        "mlflow_run_id": p.mlflow_run_id,
        "measured_at": p.measured_at,
        "measured_on": measured_on,
        "schema_version": SCHEMA_VERSION,
        "provenance": p.provenance,
    }


def frame_of(profiles: Iterable[Profile]) -> pl.DataFrame:
    return pl.DataFrame([profile_row(p) for p in profiles], schema=SCHEMA)


def _nan(value: object) -> float:
    return math.nan if value is None else float(value)  # type: ignore[arg-type]


def row_profile(row: dict[str, object]) -> Profile:
    sig = HardwareSignature(str(row["gpu"]), int(row["gpu_total_mib"]), str(row["driver"]), str(row["framework"]))  # type: ignore[call-overload]
    return Profile(
        workload=str(row["workload"]),
        knobs=Knobs.from_json(str(row["knobs"])),
        signature=sig,
        resources=ResourceVector(
            sm=float(row["sm"]),  # type: ignore[arg-type]
            gpu_mem_mib=float(row["gpu_mem_mib"]),  # type: ignore[arg-type]
            cpu_cores=float(row["cpu_cores"]),  # type: ignore[arg-type]
            host_mem_mib=float(row["host_mem_mib"]),  # type: ignore[arg-type]
        ),
        throughput=float(row["throughput"]),  # type: ignore[arg-type]
        unit=str(row["unit"]),
        source=Source(str(row["source"])),
        counters=Counters(*(_nan(row[k]) for k in ("sm_active", "sm_occupancy", "dram_active", "fb_used_mb", "tensor_active"))),
        mlflow_run_id=str(row["mlflow_run_id"] or ""),
        measured_at=str(row["measured_at"] or ""),
        provenance=str(row.get("provenance") or ""),
    )


def read_regular_file(path: Path, limit: int | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (default ``MAX_FILE_BYTES``), read without ever blocking.

    Opened non-blocking and checked on the open descriptor (no window between the check and the read):
    a FIFO, a device (``/dev/zero``), a directory or a symlink loop is a ``SpecError``, not a hang.
    """
    limit = MAX_FILE_BYTES if limit is None else limit
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SpecError(f"cannot be opened ({exc.strerror or type(exc).__name__})", where=str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SpecError("not a regular file (a FIFO, device or directory is never read)", where=str(path))
        if info.st_size > limit:
            raise SpecError(f"{info.st_size:,} bytes is above the {limit:,}-byte limit of a profile file", where=str(path))
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise SpecError(f"cannot be read ({exc.strerror or type(exc).__name__})", where=str(path)) from None
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while we read it
        raise SpecError(f"more than the {limit:,}-byte limit of a profile file", where=str(path))
    return data


def read_profile_frame(path: Path) -> pl.DataFrame:
    """Every row of one parquet file, cast to the store's schema (a value of the wrong type reads as null).

    :raises SpecError: naming the file, when it is not a regular, readable parquet file or lacks a column.
    """
    data = read_regular_file(path)
    try:
        df = pl.read_parquet(io.BytesIO(data))
    except Exception as exc:  # polars raises several types for truncated / foreign files
        raise SpecError(f"not a readable parquet file ({type(exc).__name__}: {str(exc)[:120]})", where=str(path)) from None
    df = df.with_columns([pl.lit(None, dtype=pl.String).alias(c) for c in OPTIONAL_COLUMNS if c not in df.columns])
    missing = [c for c in SCHEMA if c not in df.columns]
    if missing:
        raise SpecError(f"schema mismatch: missing columns {missing}", where=str(path))
    try:
        return df.select([pl.col(c).cast(t, strict=False) for c, t in SCHEMA.items()])
    except Exception as exc:  # a nested type that cannot be cast at all
        raise SpecError(f"schema mismatch: {str(exc)[:160]}", where=str(path)) from None


@dataclass(frozen=True, slots=True)
class Upserted:
    """What a write did: rows written, rows refused by the checks (``rst.quarantine``), files moved aside."""

    written: int
    refused: tuple[QuarantinedRow, ...] = ()
    moved_aside: tuple[str, ...] = ()  # "<damaged file> -> <where it went>"

    def notes(self) -> tuple[str, ...]:
        """One line per refused row and moved file, for logs and command output."""
        return (*(f"refused {r}" for r in self.refused), *(f"unreadable file moved aside: {m}" for m in self.moved_aside))


def check_profiles(profiles: Sequence[Profile], where: str, *, measured_on: str = "") -> tuple[pl.DataFrame, tuple[QuarantinedRow, ...]]:
    """(rows that may enter the store, refused rows) of profiles about to be written or used: the same
    checks as rows read from a file (``rst.quarantine``); a refused row's ``row`` is its index in ``profiles``."""
    frame = pl.DataFrame([_stored_row(p, measured_on) for p in profiles], schema=SCHEMA)
    return split_rows(frame, where)


def read_profile_rows(path: Path) -> tuple[pl.DataFrame, tuple[QuarantinedRow, ...]]:
    """(usable rows, quarantined rows) of one file; see ``rst.quarantine`` for the checks."""
    return split_rows(read_profile_frame(path), str(path))


def read_profile_file(path: Path) -> pl.DataFrame:
    """The usable rows of one parquet file (quarantined rows left out); a defective file is a SpecError."""
    return read_profile_rows(path)[0]


@dataclass
class ProfileStore:
    """Profiles keyed by (workload, knobs, hardware signature), persisted as parquet under ``root``.

    A defective file is skipped and reported in ``problems``; a defective row (a missing, non-finite or
    out-of-range value) is quarantined: left out, listed by ``quarantined()`` and summed up per file in
    ``problems``. The estimator fills in for what is left out, so a bad value never stops planning.
    """

    root: Path
    problems: list[SpecError] = field(default_factory=list)
    estimator: Estimator | None = field(default=None, repr=False)  # default: traced where traced (module doc)
    _quarantined: tuple[QuarantinedRow, ...] = field(default=(), repr=False)
    _frame: pl.DataFrame | None = field(default=None, repr=False)
    _index: dict[tuple[str, str], dict[str, list[Profile]]] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, root: str | os.PathLike[str]) -> ProfileStore:
        return cls(Path(root))

    def files(self) -> list[Path]:
        """Every ``*.parquet`` entry of the folder (whatever its type: ``frame`` reads only regular files)."""
        try:
            return sorted(self.root.glob("*.parquet")) if self.root.is_dir() else []
        except OSError:
            return []

    def frame(self) -> pl.DataFrame:
        if self._frame is None:
            parts, self.problems = [], []
            quarantined: list[QuarantinedRow] = []
            for path in self.files():
                try:
                    good, bad = read_profile_rows(path)
                except SpecError as exc:
                    self.problems.append(exc)
                    continue
                except Exception as exc:  # never let one file stop planning, whatever it holds
                    self.problems.append(SpecError(f"unreadable ({type(exc).__name__}: {str(exc)[:120]})", where=str(path)))
                    continue
                parts.append(good)
                quarantined += bad
                if bad:
                    self.problems.append(SpecError(
                        f"{len(bad)} rows quarantined (left out), first: row {bad[0].row} "
                        f"{bad[0].workload} {bad[0].knobs}: {bad[0].reason}", where=str(path)))
            self._quarantined = tuple(quarantined)
            self._frame = pl.concat(parts) if parts else pl.DataFrame(schema=SCHEMA)
        return self._frame

    def estimate(self, workload: Workload, knobs: Knobs, gpu: GpuModel) -> Profile | None:
        """The estimator's profile of one configuration (no stored row consulted)."""
        if self.estimator is None:
            from elastico_core.rst.traced_estimator import TracedEstimator

            self.estimator = TracedEstimator.open(self.root)
        return self.estimator(workload, knobs, gpu)

    def notes(self) -> tuple[str, ...]:
        """Each problem as the planner's notes and the controller's log say it (one wording, so said once)."""
        return tuple(f"profile store: {p} (the estimator fills in for its rows)" for p in self.problems)

    def quarantined(self) -> tuple[QuarantinedRow, ...]:
        """The rows left out of the last read (for warnings and the status page)."""
        self.frame()
        return self._quarantined

    def _invalidate_cache(self) -> None:
        self._frame = None
        self._index.clear()

    # ---- writes -------------------------------------------------------------------------------
    def upsert(self, profiles: Sequence[Profile], *, measured_on: str = "", where: str = "new rows") -> Upserted:
        """Insert or replace rows (same key); rows that fail ``rst.quarantine``'s checks are refused, not written.

        ``where`` names the rows' origin in the refusals (a report, an import file). A damaged file in the
        way is moved aside (see the module doc), so a report never fails on it twice.
        """
        if not profiles:
            return Upserted(0)
        new, refused = check_profiles(profiles, where, measured_on=measured_on)
        moved: list[str] = []
        if new.height:
            self.root.mkdir(parents=True, exist_ok=True)
        for sig_key, part in new.group_by("signature"):
            sig = HardwareSignature.from_key(str(sig_key[0]))
            path = self.root / f"{sig.slug()}.parquet"
            if os.path.lexists(path):  # every old row is kept, quarantined ones too, unless replaced by key
                try:
                    old = read_profile_frame(path)
                except SpecError as exc:
                    moved.append(f"{path} -> {_move_aside(path)} ({exc.message})")
                else:
                    part = pl.concat([old.join(part.select(KEY), on=list(KEY), how="anti", nulls_equal=True), part])
            _atomic_write(part.sort(list(KEY)), path)
        self._invalidate_cache()
        return Upserted(new.height, refused, tuple(moved))

    def invalidate(self, signature: HardwareSignature | str, *, source: Source | None = None) -> int:
        """Drop one signature's rows (all, or only one source); other signatures are not touched."""
        sig = HardwareSignature.from_key(signature) if isinstance(signature, str) else signature
        path = self.root / f"{sig.slug()}.parquet"
        if not path.exists():
            return 0
        df = read_profile_frame(path)
        keep = df.filter((pl.col("source") != source.value).fill_null(True)) if source else df.clear()
        removed = df.height - keep.height
        if keep.height:
            _atomic_write(keep, path)
        else:
            path.unlink()
        self._invalidate_cache()
        return removed

    # ---- reads --------------------------------------------------------------------------------
    def _rows(self, workload: Workload, gpu: str) -> dict[str, list[Profile]]:
        """The workload's usable rows on one GPU model, by knobs: rows off its grid are left out (a custom
        workload's grid is known only here, and the nearest-neighbour ratios must never see them)."""
        key = (workload.name, gpu)
        if key not in self._index:
            df = self.frame().filter((pl.col("workload") == workload.name) & (pl.col("gpu") == gpu))
            by_knobs: dict[str, list[Profile]] = {}
            for row in df.iter_rows(named=True):
                try:
                    profile = row_profile(row)
                except (SpecError, ValueError, TypeError, OverflowError):  # checked on read; never let one row stop a lookup
                    continue
                if workload.off_grid(profile.knobs) is not None:
                    continue
                by_knobs.setdefault(str(row["knobs"]), []).append(profile)
            self._index[key] = by_knobs
        return self._index[key]

    def lookup(
        self, workload: Workload, knobs: Knobs, gpu: GpuModel, signature: HardwareSignature | None = None
    ) -> Profile | None:
        """The best available profile of one configuration (see module doc), None if it cannot run."""
        rows = self._rows(workload, gpu.name)
        candidates = rows.get(knobs.to_json(), [])
        measured = [p for p in candidates if p.source is Source.MEASURED]
        if measured:
            exact = [p for p in measured if signature is not None and p.signature == signature]
            return (exact or sorted(measured, key=lambda p: p.measured_at))[-1]
        calibrated = [p for p in candidates if p.source is Source.ESTIMATED and p.provenance.startswith("calibrated")]
        if calibrated:
            exact = [p for p in calibrated if signature is not None and p.signature == signature]
            return (exact or calibrated)[-1]
        interpolated = self._interpolate(workload, knobs, gpu, rows)
        if interpolated is not None:
            return interpolated
        estimated = [p for p in candidates if p.source is Source.ESTIMATED]
        if estimated:
            return estimated[-1]
        return self.estimate(workload, knobs, gpu)

    def _interpolate(
        self, workload: Workload, knobs: Knobs, gpu: GpuModel, rows: dict[str, list[Profile]]
    ) -> Profile | None:
        measured = [p for ps in rows.values() for p in ps if p.source is Source.MEASURED]
        if not measured:
            return None
        target = self.estimate(workload, knobs, gpu)
        if target is None:
            return None
        best: tuple[float, Profile, Profile] | None = None
        for m in measured:
            est = self.estimate(workload, m.knobs, gpu)
            if est is None:
                continue
            dist = _resource_distance(target.resources, m.resources, gpu)
            if best is None or dist < best[0]:
                best = (dist, m, est)
        if best is None:
            return None
        _, neighbour, neighbour_est = best
        ratio = target.throughput / neighbour_est.throughput
        mem_ratio = target.resources.gpu_mem_mib / max(neighbour_est.resources.gpu_mem_mib, 1.0)
        return replace(
            target,
            throughput=neighbour.throughput * ratio,
            resources=replace(target.resources, gpu_mem_mib=min(gpu.memory_mib, neighbour.resources.gpu_mem_mib * mem_ratio)),
            source=Source.INTERPOLATED,
            mlflow_run_id=neighbour.mlflow_run_id,
        )


def _resource_distance(a: ResourceVector, b: ResourceVector, gpu: GpuModel) -> float:
    """l2 distance of resource vectors, each dimension normalised by one GPU's (or node share's) size."""
    return math.sqrt(
        (a.sm - b.sm) ** 2
        + ((a.gpu_mem_mib - b.gpu_mem_mib) / gpu.memory_mib) ** 2
        + ((a.cpu_cores - b.cpu_cores) / 16.0) ** 2
        + ((a.host_mem_mib - b.host_mem_mib) / 65536.0) ** 2
    )


def _stored_row(p: Profile, measured_on: str) -> dict[str, object]:
    """``profile_row`` with integers beyond Int64 (an imported ``gpu_mem_mib`` of 2**70) made null, so the
    frame can be built and the checks refuse the row instead of the constructor raising."""
    row = profile_row(p, measured_on=measured_on)
    total = row["gpu_total_mib"]
    if not isinstance(total, int) or isinstance(total, bool) or not -(2**63) <= total < 2**63:
        row["gpu_total_mib"] = None
    return row


def _move_aside(path: Path) -> Path:
    """Rename a damaged store file out of the ``*.parquet`` glob, keeping it as evidence."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    os.replace(path, target)
    return target


def _atomic_write(df: pl.DataFrame, path: Path) -> None:
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    df.write_parquet(tmp)
    os.replace(tmp, path)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
