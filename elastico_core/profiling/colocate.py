"""Co-location experiments (§3.3.2): a pair measured alone and together on one device; rows for the IAC dataset.

Both jobs are launched and warmed up, then measured by the interleaved protocol of
``profiling.windows``: A alone (B paused), B alone, A+B, three rounds in rotating order, both
processes alive all along. Each side's solo and co-located throughput are medians of windows of the
same run, so a slowdown compares like with like (solo figures taken minutes earlier from the store
made light pairs look faster together than apart). A median slowdown below 0.97 is re-measured once
and, if it persists, recorded with ``source=suspect`` (interference-model training skips such rows).
On a GPU the pair shares it under MPS where available; on CPU the two processes share the device's
cores. A pair that runs out of device memory gets ``colo_tput = 0`` on both sides (the contract's
"did not fit"). Rows follow the co-location dataset contract of DESIGN.md; the optional columns
``gpu_mem_mib`` and ``source`` and the protocol's spread (``repeats_x``, ``slowdown_min_x``,
``slowdown_max_x``) close each row.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from elastico_core.model.errors import SpecError
from elastico_core.model.knobs import Knobs
from elastico_core.profiling.configs import find_workload, resolve_knobs
from elastico_core.profiling.gpu_probe import GpuProbe, open_probe
from elastico_core.profiling.launcher import JobFailed, JobProcess
from elastico_core.profiling.lineage import COLOCATION_EXPERIMENT, Lineage
from elastico_core.profiling.mps import mps_session
from elastico_core.profiling.pair_rows import RowDevice, did_not_fit_row, pair_row
from elastico_core.profiling.pairs import Candidate, stratum
from elastico_core.profiling.profiler import ProfilerConfig, launch_spec, prepare
from elastico_core.profiling.records import COLUMNS, INT_COLUMNS, OPTIONAL, STRING_COLUMNS
from elastico_core.profiling.windows import PairFigures, WindowConfig, interleave, wait_warm
from elastico_core.rst.store import ProfileStore

SCHEMA: dict[str, type[pl.DataType]] = {
    c: pl.String if c in STRING_COLUMNS else pl.Int64 if c in INT_COLUMNS else pl.Float64 for c in COLUMNS
}


def parse_side(text: str) -> Candidate:
    """``resnet50`` or ``resnet50:{"micro_batch":64}`` -> a validated configuration (defaults fill the rest)."""
    name, _, knobs_json = text.partition(":")
    workload = find_workload(name)
    knobs = Knobs.from_json(knobs_json) if knobs_json.strip() else Knobs.of({})
    return Candidate(workload, resolve_knobs(workload, knobs))


@dataclass(frozen=True, slots=True)
class PairResult:
    row: dict[str, object]
    stratum: str
    mps: bool
    fitted: bool  # False: the pair ran out of device memory
    attempts: int = 1  # 2: the first measurement was suspect and the pair was measured again

    @property
    def slowdowns(self) -> tuple[float, float]:
        def s(x: str) -> float:
            colo = float(self.row[f"colo_tput_{x}"])  # type: ignore[arg-type]
            return float(self.row[f"solo_tput_{x}"]) / colo if colo > 0 else math.inf  # type: ignore[arg-type]

        return s("a"), s("b")


def pair_windows(cfg: ProfilerConfig) -> WindowConfig:
    """The interleaved protocol's windows: ``--measure-s`` long each, ``cfg.repeats`` rounds."""
    w = cfg.windows
    return WindowConfig(window_s=w.measure_s, settle_s=0.5 if cfg.device.gpu is not None else 0.2,
                        repeats=cfg.repeats, min_iters=w.min_iters, max_stretch=w.max_stretch)  # fmt: skip


def _params(job: JobProcess) -> int:
    value = (job.start_event or {}).get("params", 0)
    return int(value) if isinstance(value, (int, float)) else 0


def measure_pair(
    a: Candidate, b: Candidate, cfg: ProfilerConfig, store: ProfileStore, probe: GpuProbe | None
) -> PairResult:
    """Launch both, warm them up together, interleave; re-measure once when the result is suspect."""
    sig = cfg.signature(probe)
    dev = RowDevice(sig.gpu, float(sig.gpu_mem_mib), None if cfg.device.gpu is not None else len(cfg.device.cpus))
    scratch = Path(tempfile.mkdtemp(prefix="elastico-pair-", dir=cfg.workroot))
    jobs: list[JobProcess] = []
    with mps_session(cfg.device, cfg.mps) as mps_env:
        extra = mps_env or ()
        try:
            for i, c in enumerate((a, b)):
                jobs.append(JobProcess.launch(launch_spec(c.workload, c.knobs, cfg, extra), scratch / f"job{i}-{c.workload.name}"))
            w = cfg.windows
            wait_warm(jobs, w.warmup_s, w.warmup_iters, w.startup_timeout_s)
            fig: PairFigures = interleave(jobs[0], jobs[1], pair_windows(cfg), probe)
            attempts = 1
            if fig.suspect:
                fig, attempts = interleave(jobs[0], jobs[1], pair_windows(cfg), probe), 2
            row = pair_row(dev, a, b, fig, (_params(jobs[0]), _params(jobs[1])))
            return PairResult({c: row.get(c) for c in COLUMNS}, stratum(a, b), mps_env is not None, True, attempts)
        except JobFailed as exc:
            if not exc.out_of_memory:
                raise
            solo = tuple(_solo_elsewhere(store, c, cfg, probe) for c in (a, b))
            row = did_not_fit_row(dev, a, b, (solo[0], solo[1]))
            return PairResult({c: row.get(c) for c in COLUMNS}, stratum(a, b), mps_env is not None, False)
        finally:
            for job in jobs:
                job.stop(grace_s=0)
            shutil.rmtree(scratch, ignore_errors=True)


def _solo_elsewhere(store: ProfileStore, c: Candidate, cfg: ProfilerConfig, probe: GpuProbe | None) -> float:
    """A side's throughput alone when the pair never ran: the store's figure (measured, else estimated)."""
    from elastico_core.model.hardware import gpu_model

    sig = cfg.signature(probe, c.workload.kind)
    try:
        model = gpu_model(sig.gpu)
    except SpecError:
        model = None
    if model is not None:
        p = store.lookup(c.workload, c.knobs, model, sig)
        if p is not None:
            return p.throughput
    from elastico_core.profiling.profiler import cached_profile

    hit = cached_profile(store, c.workload.name, c.knobs, sig)
    return hit.throughput if hit is not None else 1.0  # unknown: a placeholder > 0, as the contract requires


def _null_nan(value: object) -> object:
    return None if isinstance(value, float) and math.isnan(value) else value


def rows_frame(rows: Sequence[Mapping[str, object]]) -> pl.DataFrame:
    """Rows in contract order; unknown (NaN) counters become nulls, which the contract calls empty."""
    return pl.DataFrame([{c: _null_nan(r.get(c)) for c in COLUMNS} for r in rows], schema=SCHEMA)


def existing_rows(path: Path) -> pl.DataFrame | None:
    """The rows of a co-location dataset file about to be appended to (None: no file yet).

    :raises SpecError: an unknown format, or a file that does not follow the contract (refuse to append
        rather than corrupt it): callers check every target before writing anything.
    """
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise SpecError("unknown dataset format (want .csv or .parquet)", where=f"dataset {str(path)!r}")
    if not path.exists():
        return None
    try:
        old = pl.read_csv(path, schema_overrides=SCHEMA) if suffix == ".csv" else pl.read_parquet(path)
        absent = [pl.lit(None, dtype=SCHEMA[c]).alias(c) for c in OPTIONAL if c not in old.columns]
        return old.with_columns(absent).select([pl.col(c).cast(t) for c, t in SCHEMA.items()])
    except Exception as exc:  # foreign or damaged file
        raise SpecError(f"existing file does not follow the co-location contract ({type(exc).__name__}: {str(exc)[:120]})",
                        where=f"dataset {str(path)!r}") from None  # fmt: skip


def append_rows(path: Path, rows: Sequence[Mapping[str, object]]) -> int:
    """Append to a co-location dataset (CSV or parquet by suffix); an existing file must follow the contract."""
    new = rows_frame(rows)
    old = existing_rows(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"not writable ({type(exc).__name__})", where=f"dataset {str(path)!r}") from None
    if old is not None:
        new = pl.concat([old, new])
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if path.suffix.lower() == ".csv":
        new.write_csv(tmp)
    else:
        new.write_parquet(tmp)
    os.replace(tmp, path)
    return len(rows)


OnPair = Callable[[int, int, Candidate, Candidate, str], None]


@dataclass(frozen=True, slots=True)
class ColocationRun:
    run_id: str
    results: tuple[PairResult, ...]
    dataset: Path


def colocation_run(
    pairs: Sequence[tuple[Candidate, Candidate]],
    cfg: ProfilerConfig,
    store: ProfileStore,
    lineage: Lineage,
    out: Path,
    *,
    name: str = "colocate",
    on_pair: OnPair | None = None,
) -> ColocationRun:
    """Measure every pair, appending each row as it is measured, as one MLflow run."""
    cfg = prepare([c.workload for p in pairs for c in p], cfg)
    probe = open_probe(cfg.device.gpu) if cfg.device.gpu is not None else None
    signature = cfg.signature(probe)
    params = {
        "pairs": [f"{a.label} + {b.label}" for a, b in pairs][:50],
        "n_pairs": len(pairs),
        "strata": {s: sum(stratum(a, b) == s for a, b in pairs) for s in ("T+T", "T+I", "I+I")},
        "hardware_signature": signature.key,
        "scale": cfg.scale,
        "warmup_s": cfg.windows.warmup_s,
        "window_s": cfg.windows.measure_s,
        "repeats": cfg.repeats,
        "protocol": "interleaved: a alone, b alone, a+b per round, rotating order",
        "dataset": str(out),
    }
    results: list[PairResult] = []
    try:
        with lineage.run(COLOCATION_EXPERIMENT, name, params) as run:
            for i, (a, b) in enumerate(pairs):
                if on_pair:
                    on_pair(i, len(pairs), a, b, "measuring")
                res = measure_pair(a, b, cfg, store, probe)
                append_rows(out, [res.row])
                results.append(res)
                sa, sb = res.slowdowns
                run.log_metrics({"slowdown_a": sa if math.isfinite(sa) else 0.0, "slowdown_b": sb if math.isfinite(sb) else 0.0,
                                 "fitted": float(res.fitted), "suspect": float(res.row.get("source") == "suspect"),
                                 "attempts": float(res.attempts)}, step=i)  # fmt: skip
                if on_pair:
                    status = f"slowdown {sa:.2f} / {sb:.2f}" if res.fitted else "did not fit"
                    on_pair(i, len(pairs), a, b, status + (" (suspect)" if res.row.get("source") == "suspect" else ""))
            run.log_metrics({"pairs_measured": len(results), "mps": float(any(r.mps for r in results)),
                             "pairs_suspect": float(sum(r.row.get("source") == "suspect" for r in results))})  # fmt: skip
            scratch = Path(tempfile.mkdtemp(prefix="elastico-lineage-", dir=cfg.workroot))
            try:
                run.log_frame(
                    rows_frame([r.row for r in results]), scratch / "colocation.parquet", "colocation", "iac-training"
                )
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            return ColocationRun(run.id, tuple(results), out)
    finally:
        if probe is not None:
            probe.close()
