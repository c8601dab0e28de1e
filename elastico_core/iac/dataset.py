"""The co-location dataset contract (DESIGN.md): read, validate, and turn into training samples.

One row per co-located pair on one GPU. Required columns: ``gpu`` and, for each side ``x`` in ``a``,
``b``: ``workload_x``, ``kind_x`` (``train``|``infer``), ``knobs_x`` (JSON object), ``params_x``
(model parameter count, > 0), ``solo_tput_x`` (> 0), ``colo_tput_x`` (>= 0). Optional: the counters
``sm_active_x, sm_occupancy_x, dram_active_x, tensor_active_x`` (fractions 0..1) and ``fb_used_mb_x``
(MiB), empty where unknown; ``gpu_mem_mib`` (device memory, else looked up from ``gpu``); ``source``
(``measured``|``synthetic``|``suspect``|``runtime``, default ``measured``); the interleaved protocol's
spread ``repeats_x``, ``slowdown_min_x``, ``slowdown_max_x`` (read by people, not by training); and
where a row came from the running cluster (``source=runtime``, ``state.runtime_pairs``): ``job_a``,
``job_b``, ``signature`` and the co-located window ``window_start``/``window_end`` (ISO UTC), which
orders runtime rows in time (retraining judges on the newest).

A ``suspect`` row is a measurement whose median slowdown stayed below 0.97 after a re-measurement:
sharing a device cannot make a job faster, so the row is an error, not a label. It is kept in the file
(it says what went wrong where) and skipped by training, which reports how many it skipped.

The label of side ``a`` is ``solo_tput_a / colo_tput_a``, clipped to >= 1 (co-location cannot speed a
job up; values below 1 are measurement noise). ``colo_tput = 0`` on both sides means the pair did
not fit: such rows are kept (they teach feasibility) but excluded from slowdown samples and counted in
``excluded_infeasible``. A row with exactly one side at 0 is an error: a pair either ran or did not.
Errors name the file, the row (1-based, header excluded) and the column.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np
import polars as pl

from elastico_core.iac.batch import PER_JOB_FEATURES, feature_row
from elastico_core.iac.cf import PairKeys, canonical_knobs
from elastico_core.iac.features import both_directions
from elastico_core.model.errors import SpecError
from elastico_core.model.hardware import HardwareSignature, gpu_model
from elastico_core.model.knobs import MAX_KNOBS_JSON_CHARS, Knobs
from elastico_core.model.profile import Counters, Profile, Source
from elastico_core.model.resources import ResourceVector
from elastico_core.model.workload import JobKind, Workload
from elastico_core.rst.catalog import PAPER_WORKLOADS

SIDES = ("a", "b")
SIDE_FIELDS = ("workload", "kind", "knobs", "params", "solo_tput", "colo_tput")
COUNTER_FIELDS = ("sm_active", "sm_occupancy", "dram_active", "fb_used_mb", "tensor_active")
REQUIRED_COLUMNS: tuple[str, ...] = ("gpu", *(f"{f}_{s}" for s in SIDES for f in SIDE_FIELDS))
SPREAD_FIELDS = ("repeats", "slowdown_min", "slowdown_max")
RUNTIME_COLUMNS = ("job_a", "job_b", "signature", "window_start", "window_end")
OPTIONAL_COLUMNS: tuple[str, ...] = (
    *(f"{f}_{s}" for s in SIDES for f in COUNTER_FIELDS),
    "gpu_mem_mib",
    "source",
    *(f"{f}_{s}" for s in SIDES for f in SPREAD_FIELDS),
    *RUNTIME_COLUMNS,
)
SOURCES = ("measured", "synthetic", "suspect", "runtime")

# Device memory (MiB, as nvidia-smi reports it) of GPUs that public datasets use but the planner does
# not schedule; the planner's own models come from ``model.hardware``.
LEGACY_GPU_MIB: Mapping[str, int] = MappingProxyType({"k80": 11441, "p100": 16280, "v100": 16160})

_STRING_COLS = ("gpu", "workload_a", "workload_b", "kind_a", "kind_b", "knobs_a", "knobs_b", "source", *RUNTIME_COLUMNS)


class PairType:
    """Co-location type labels, by the number of inference jobs in the pair."""

    LABELS = ("T+T", "T+I", "I+I")


@dataclass(frozen=True, slots=True)
class Samples:
    """Training samples: two per feasible pair (blocks swapped), with what CV and reports need.

    ``group`` is the unordered workload pair (``"bert|resnet50"``): grouped CV never splits it.
    """

    X: np.ndarray  # (n, N_FEATURES)
    y: np.ndarray  # slowdown S = T_solo / T_colo >= 1
    group: np.ndarray  # str (object)
    pair_type: np.ndarray  # "T+T" | "T+I" | "I+I" (object)
    synthetic: np.ndarray  # bool: from the synthetic generator, never a measured accuracy
    keys: PairKeys  # who meets whom on which GPU (the collaborative-filtering model reads it)

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def take(self, index: np.ndarray) -> Samples:
        return Samples(self.X[index], self.y[index], self.group[index], self.pair_type[index], self.synthetic[index],
                       self.keys.take(index))


@dataclass(frozen=True, slots=True)
class CoLocationDataset:
    """A validated co-location table; ``frame`` has every contract column (optional ones filled)."""

    frame: pl.DataFrame
    origin: str

    @property
    def rows(self) -> int:
        return self.frame.height

    def feasible_mask(self) -> np.ndarray:
        colo_a = self.frame["colo_tput_a"].to_numpy()
        colo_b = self.frame["colo_tput_b"].to_numpy()
        return (colo_a > 0) & (colo_b > 0)

    @property
    def excluded_infeasible(self) -> int:
        """Rows with colo_tput 0 on both sides (did not fit): excluded from slowdown training."""
        return int((~self.feasible_mask()).sum())

    @property
    def synthetic_rows(self) -> int:
        return int((self.frame["source"] == "synthetic").sum())

    @property
    def suspect_rows(self) -> int:
        """Rows marked suspect (a median slowdown below 0.97): skipped by training."""
        return int((self.frame["source"] == "suspect").sum())

    def usable_mask(self) -> np.ndarray:
        """Rows that teach slowdown: feasible and not suspect."""
        return self.feasible_mask() & (self.frame["source"] != "suspect").to_numpy()

    def digest(self) -> str:
        """SHA-256 of the contract columns (row order included): the dataset's identity in MLflow."""
        h = hashlib.sha256()
        h.update(",".join(self.frame.columns).encode())
        h.update(self.frame.write_csv().encode())
        return h.hexdigest()

    def samples(self) -> Samples:
        """Two samples per usable row (feasible, not suspect): S(a|b) with blocks (a, b), S(b|a) with (b, a)."""
        df = self.frame.filter(pl.Series(self.usable_mask()))
        a = side_values(df, "a")
        b = side_values(df, "b")
        mem = df["gpu_mem_mib"].to_numpy().astype(np.float64)
        X = both_directions(a, b, mem)
        ya = df["solo_tput_a"].to_numpy() / df["colo_tput_a"].to_numpy()
        yb = df["solo_tput_b"].to_numpy() / df["colo_tput_b"].to_numpy()
        y = np.maximum(np.concatenate([ya, yb]).astype(np.float64), 1.0)
        wa = df["workload_a"].to_list()
        wb = df["workload_b"].to_list()
        group = np.array(["|".join(sorted((x, z))) for x, z in zip(wa, wb, strict=True)], dtype=object)
        n_inf = (df["kind_a"] == "infer").cast(pl.Int64).to_numpy() + (df["kind_b"] == "infer").cast(pl.Int64).to_numpy()
        ptype = np.array([PairType.LABELS[k] for k in n_inf], dtype=object)
        synth = (df["source"] == "synthetic").to_numpy()
        ka = np.array([canonical_knobs(k) for k in df["knobs_a"].to_list()], dtype=object)
        kb = np.array([canonical_knobs(k) for k in df["knobs_b"].to_list()], dtype=object)
        na, nb = np.array(wa, dtype=object), np.array(wb, dtype=object)
        keys = PairKeys(np.concatenate([na, nb]), np.concatenate([ka, kb]), np.concatenate([nb, na]),
                        np.concatenate([kb, ka]), np.concatenate([mem, mem]))
        return Samples(
            X=X,
            y=y,
            group=np.concatenate([group, group]),
            pair_type=np.concatenate([ptype, ptype]),
            synthetic=np.concatenate([synth, synth]),
            keys=keys,
        )


def read_dataset(path: str | Path) -> CoLocationDataset:
    """Read a contract file (``.csv`` or ``.parquet``) and validate it; errors name row and column."""
    p = Path(path)
    if not p.exists():
        raise SpecError("no such file", where=str(p))
    try:
        if p.suffix.lower() == ".parquet":
            df = pl.read_parquet(p)
        elif p.suffix.lower() == ".csv":
            df = pl.read_csv(p, infer_schema_length=0)  # all strings: we cast and report ourselves
        else:
            raise SpecError("a co-location dataset is a .csv or .parquet file", where=str(p))
    except SpecError:
        raise
    except Exception as exc:  # polars raises several types for malformed files
        raise SpecError(f"not readable ({type(exc).__name__}: {str(exc)[:160]})", where=str(p)) from None
    return validate(df, origin=str(p))


def validate(df: pl.DataFrame, *, origin: str = "dataset") -> CoLocationDataset:
    """Check a frame against the contract and normalise its types; raise SpecError at the first defect."""
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise SpecError(f"missing required column(s) {missing}", where=origin, field=missing[0])
    if df.height == 0:
        raise SpecError("no rows", where=origin)
    cols: dict[str, pl.Series] = {}
    for name in _STRING_COLS:
        if name in df.columns:
            try:
                cols[name] = df[name].cast(pl.String)
            except Exception:
                raise SpecError(f"column of type {df[name].dtype} is not text", where=origin, field=name) from None
    src = cols.get("source", pl.Series("source", [None] * df.height, dtype=pl.String))
    cols["source"] = src.fill_null("measured")
    for name in RUNTIME_COLUMNS:
        cols.setdefault(name, pl.Series(name, [None] * df.height, dtype=pl.String))
    numeric = [f"{f}_{s}" for s in SIDES for f in ("params", "solo_tput", "colo_tput", *COUNTER_FIELDS)]
    numeric += ["gpu_mem_mib", *(f"{f}_{s}" for s in SIDES for f in SPREAD_FIELDS)]
    for name in numeric:
        cols[name] = _numeric(df, name, origin) if name in df.columns else pl.Series(name, [None] * df.height, dtype=pl.Float64)
    out = pl.DataFrame(cols)
    _check_rows(out, origin)
    mem = _gpu_memory(out, origin)
    out = out.with_columns(pl.Series("gpu_mem_mib", mem, dtype=pl.Float64))
    order = [*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS]
    return CoLocationDataset(out.select(order), origin)


def _numeric(df: pl.DataFrame, name: str, origin: str) -> pl.Series:
    raw = df[name]
    if raw.dtype == pl.String:
        cleaned = raw.str.strip_chars().replace("", None)
        cast = cleaned.cast(pl.Float64, strict=False)
        bad = cleaned.is_not_null() & cast.is_null()
        if bad.any():
            i = int(bad.arg_true()[0])
            raise SpecError(f"not a number: {raw[i]!r}", where=f"{origin}: row {i + 1}", field=name)
        return cast.alias(name)
    try:
        return raw.cast(pl.Float64, strict=True).alias(name)
    except Exception:
        raise SpecError(f"column of type {raw.dtype} is not numeric", where=origin, field=name) from None


def _first(mask: pl.Series) -> int | None:
    hits = mask.fill_null(False).arg_true()
    return int(hits[0]) if len(hits) else None


def _check_rows(df: pl.DataFrame, origin: str) -> None:
    def fail(i: int, column: str, message: str) -> None:
        raise SpecError(message, where=f"{origin}: row {i + 1}", field=column)

    for col in ("gpu", "workload_a", "workload_b"):
        i = _first(df[col].is_null() | (df[col].str.strip_chars() == ""))
        if i is not None:
            fail(i, col, "must not be empty")
    for s in SIDES:
        kind = df[f"kind_{s}"]
        i = _first(kind.is_null() | ~kind.is_in([k.value for k in JobKind]))
        if i is not None:
            fail(i, f"kind_{s}", f"unknown kind {kind[i]!r} (want 'train' or 'infer')")
        for col, test, what in (
            (f"params_{s}", lambda x: x.is_null() | (x <= 0) | x.is_nan(), "must be a parameter count > 0"),
            (f"solo_tput_{s}", lambda x: x.is_null() | (x <= 0) | x.is_nan() | x.is_infinite(), "isolated throughput must be > 0"),
            (f"colo_tput_{s}", lambda x: x.is_null() | (x < 0) | x.is_nan() | x.is_infinite(), "co-located throughput must be >= 0"),
        ):
            i = _first(test(df[col]))
            if i is not None:
                fail(i, col, f"{what}, got {df[col][i]!r}")
        for f in COUNTER_FIELDS:
            col = f"{f}_{s}"
            x = df[col]
            bad = (x < 0) | x.is_infinite() if f == "fb_used_mb" else (x < 0) | (x > 1) | x.is_infinite()
            i = _first(bad)
            if i is not None:
                want = "MiB >= 0" if f == "fb_used_mb" else "a fraction in 0..1"
                fail(i, col, f"must be {want} (or empty when unknown), got {x[i]!r}")
        knobs = df[f"knobs_{s}"]
        for i, text in enumerate(knobs.to_list()):
            _parse_knobs(text, where=f"{origin}: row {i + 1}", field=f"knobs_{s}")
    one_sided = (df["colo_tput_a"] == 0) ^ (df["colo_tput_b"] == 0)
    i = _first(one_sided)
    if i is not None:
        col = "colo_tput_a" if df["colo_tput_a"][i] == 0 else "colo_tput_b"
        fail(i, col, "0 on one side only: a pair either ran (both > 0) or did not fit (both 0)")
    src = df["source"]
    i = _first(~src.is_in(list(SOURCES)))
    if i is not None:
        fail(i, "source", f"unknown source {src[i]!r} (want one of {list(SOURCES)})")


def _parse_knobs(text: object, *, where: str, field: str) -> dict[str, object]:
    if text is None or (isinstance(text, str) and not text.strip()):
        return {}
    if len(str(text)) > MAX_KNOBS_JSON_CHARS:
        raise SpecError(f"knobs document of {len(str(text)):,} characters (at most {MAX_KNOBS_JSON_CHARS:,})",
                        where=where, field=field)  # fmt: skip
    try:
        raw = json.loads(str(text))
    except json.JSONDecodeError as exc:
        raise SpecError(f"knobs are not valid JSON ({exc.msg})", where=where, field=field) from None
    except (RecursionError, ValueError) as exc:
        raise SpecError(f"knobs are not valid JSON ({type(exc).__name__})", where=where, field=field) from None
    if not isinstance(raw, dict):
        raise SpecError(f"knobs must be a JSON object, got {type(raw).__name__}", where=where, field=field)
    return raw


def _gpu_memory(df: pl.DataFrame, origin: str) -> np.ndarray:
    given = df["gpu_mem_mib"].to_numpy()
    out = np.array(given, dtype=np.float64)
    cache: dict[str, float] = {}
    for i, (name, mem) in enumerate(zip(df["gpu"].to_list(), given, strict=True)):
        if mem is not None and math.isfinite(mem):
            if mem <= 0:
                raise SpecError(f"must be > 0, got {mem!r}", where=f"{origin}: row {i + 1}", field="gpu_mem_mib")
            continue
        if name not in cache:
            cache[name] = _known_memory(name, where=f"{origin}: row {i + 1}")
        out[i] = cache[name]
    return out


def _known_memory(name: str, *, where: str) -> float:
    key = name.strip().lower()
    if key in LEGACY_GPU_MIB:
        return float(LEGACY_GPU_MIB[key])
    try:
        return float(gpu_model(key).memory_mib)
    except SpecError:
        known = sorted({*LEGACY_GPU_MIB, "a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb"})
        raise SpecError(
            f"unknown GPU type {name!r}: add a gpu_mem_mib column or use one of {known}", where=where, field="gpu"
        ) from None


# ---- per-job feature blocks -------------------------------------------------------------------
def side_values(df: pl.DataFrame, side: str) -> np.ndarray:
    """The (N, 14) per-job features of one side of the table, in ``PER_JOB_FEATURES`` order.

    Catalog workloads (Table 2) go through ``batch.feature_row``, exactly as the planner builds them;
    others use the knobs ``micro_batch`` (or ``batch_size``), ``checkpointing``, ``amp`` for training
    and ``isl``, ``osl``, ``prefix_ratio`` for inference, NaN where absent. ``log_params`` always comes
    from ``params_x`` and ``throughput`` from ``solo_tput_x``.
    """
    names = df[f"workload_{side}"].to_list()
    kinds = df[f"kind_{side}"].to_list()
    knobs = df[f"knobs_{side}"].to_list()
    params = df[f"params_{side}"].to_numpy()
    solo = df[f"solo_tput_{side}"].to_numpy()
    counters = np.column_stack([df[f"{f}_{side}"].to_numpy().astype(np.float64) for f in COUNTER_FIELDS])
    out = np.empty((df.height, len(PER_JOB_FEATURES)), dtype=np.float64)
    for i in range(df.height):
        raw = _parse_knobs(knobs[i], where=f"row {i + 1}", field=f"knobs_{side}")
        out[i] = _job_row(names[i], JobKind(kinds[i]), raw, float(params[i]), float(solo[i]), counters[i])
    return out


def _job_row(name: str, kind: JobKind, knobs: dict[str, object], params: float, solo: float, counters: np.ndarray) -> list[float]:
    workload = PAPER_WORKLOADS.get(name)
    c = Counters(*(float(v) for v in counters))
    if workload is not None and workload.kind is kind:
        row = feature_row(workload, _profile(workload, knobs, solo, c))
    else:
        row = _generic_row(kind, knobs, solo, c)
    row[PER_JOB_FEATURES.index("log_params")] = math.log10(params)
    return row


def _profile(workload: Workload, knobs: dict[str, object], solo: float, counters: Counters) -> Profile:
    known = {k: v for k, v in knobs.items() if isinstance(v, (int, float, str, bool))}
    return Profile(
        workload=workload.name,
        knobs=Knobs.of(known),  # type: ignore[arg-type]
        signature=HardwareSignature("dataset", 1),
        resources=ResourceVector(0.0, 0.0, 0.0, 0.0),
        throughput=solo,
        unit=workload.unit,
        source=Source.MEASURED,
        counters=counters,
    )


def _num(knobs: dict[str, object], *names: str) -> float:
    for n in names:
        v = knobs.get(n)
        if isinstance(v, bool):
            return float(v)
        if isinstance(v, (int, float)):
            return float(v)
    return math.nan


def _generic_row(kind: JobKind, knobs: dict[str, object], solo: float, c: Counters) -> list[float]:
    hw = [c.sm_active, c.sm_occupancy, c.dram_active, c.fb_used_mb, c.tensor_active]
    if kind is JobKind.INFER:
        isl, osl = _num(knobs, "isl", "input_tokens"), _num(knobs, "osl", "output_tokens")
        prefix = _num(knobs, "prefix_ratio")
        if math.isnan(prefix) and knobs.get("prefix_caching") is False:
            prefix = 0.0
        return [*hw, 1.0, math.nan, solo, 0.0, 0.0, 0.0, isl, osl, prefix]
    mb = _num(knobs, "micro_batch", "batch_size")
    ck = float(bool(knobs.get("checkpointing", False)))
    amp = float(bool(knobs.get("amp", False)))
    return [*hw, 0.0, math.nan, solo, mb, ck, amp, 0.0, 0.0, 0.0]


def concat(datasets: Sequence[CoLocationDataset]) -> CoLocationDataset:
    """Several contract tables as one (measured profiler runs append to converted public data)."""
    if len(datasets) == 1:
        return datasets[0]
    return CoLocationDataset(pl.concat([d.frame for d in datasets]), " + ".join(d.origin for d in datasets))


def write_dataset(ds: CoLocationDataset, path: str | Path) -> Path:
    """Write a contract table as CSV or parquet (by suffix)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix.lower() == ".parquet":
        ds.frame.write_parquet(p)
    elif p.suffix.lower() == ".csv":
        ds.frame.write_csv(p)
    else:
        raise SpecError("write a .csv or .parquet file", where=str(p))
    return p
