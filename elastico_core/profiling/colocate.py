"""Co-location experiments (§3.3.2): a pair runs alone, then together on one device; rows for the IAC dataset.

Each side's solo throughput and counters come from its isolated profile (the store, or a fresh
measurement); then both are launched together, warmed up, and measured over one common window. On a
GPU the pair shares it under MPS where available; on CPU the two processes share the device's cores.
A pair that runs out of device memory gets ``colo_tput = 0`` on both sides (the contract's "did not fit").
Rows follow the co-location dataset contract of DESIGN.md exactly, so they append to the same dataset:
unknown counters are empty (null), and the contract's optional ``gpu_mem_mib`` (the device's memory: a
CPU device is no GPU model the importer knows) and ``source`` (``measured``) columns close each row.
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
from elastico_core.model.profile import Profile
from elastico_core.model.workload import Workload
from elastico_core.profiling.configs import find_workload, resolve_knobs
from elastico_core.profiling.gpu_probe import GpuProbe, open_probe
from elastico_core.profiling.launcher import JobFailed
from elastico_core.profiling.lineage import COLOCATION_EXPERIMENT, Lineage
from elastico_core.profiling.mps import mps_session
from elastico_core.profiling.pairs import Candidate, stratum
from elastico_core.profiling.profiler import ProfilerConfig, launch_spec, prepare, run_jobs, solo_profile
from elastico_core.rst.store import ProfileStore

COUNTERS = ("sm_active", "sm_occupancy", "dram_active", "fb_used_mb", "tensor_active")
SIDE_COLUMNS = ("workload", "kind", "knobs", "params", "solo_tput", "colo_tput", *COUNTERS)
OPTIONAL = ("gpu_mem_mib", "source")
COLUMNS: tuple[str, ...] = ("gpu", *(f"{c}_{x}" for x in ("a", "b") for c in SIDE_COLUMNS), *OPTIONAL)
SCHEMA: dict[str, type[pl.DataType]] = {
    c: (
        pl.String
        if c in ("gpu", "source") or c.rsplit("_", 1)[0] in ("workload", "kind", "knobs")
        else pl.Int64
        if c.startswith("params")
        else pl.Float64
    )
    for c in COLUMNS
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

    @property
    def slowdowns(self) -> tuple[float, float]:
        def s(x: str) -> float:
            colo = float(self.row[f"colo_tput_{x}"])  # type: ignore[arg-type]
            return float(self.row[f"solo_tput_{x}"]) / colo if colo > 0 else math.inf  # type: ignore[arg-type]

        return s("a"), s("b")


def _side(x: str, w: Workload, p: Profile, params: int, colo: float) -> dict[str, object]:
    c = p.counters
    values = {"workload": w.name, "kind": w.kind.value, "knobs": p.knobs.to_json(), "params": params,
              "solo_tput": p.throughput, "colo_tput": colo, "sm_active": c.sm_active, "sm_occupancy": c.sm_occupancy,
              "dram_active": c.dram_active, "fb_used_mb": c.fb_used_mb, "tensor_active": c.tensor_active}  # fmt: skip
    return {f"{k}_{x}": v for k, v in values.items()}


def measure_pair(
    a: Candidate, b: Candidate, cfg: ProfilerConfig, store: ProfileStore, probe: GpuProbe | None, run_id: str
) -> PairResult:
    """Solo profiles of both sides (cached or measured), then one common co-located window."""
    solo_a = solo_profile(a.workload, a.knobs, cfg, store, probe, run_id)
    solo_b = solo_profile(b.workload, b.knobs, cfg, store, probe, run_id)
    with mps_session(cfg.device, cfg.mps) as mps_env:
        extra = mps_env or ()
        specs = [launch_spec(a.workload, a.knobs, cfg, extra), launch_spec(b.workload, b.knobs, cfg, extra)]
        try:
            ms = run_jobs(specs, cfg, probe)
            colo = (ms[0].throughput, ms[1].throughput)
            params = (ms[0].params, ms[1].params)
            fitted = True
        except JobFailed as exc:
            if not exc.out_of_memory:
                raise
            colo, fitted = (0.0, 0.0), False
            params = (0, 0)
    solo_ms = (solo_a.measurement, solo_b.measurement)
    sides = (a.workload, b.workload)
    # parameter count as the job reported it; after an OOM, from its solo run, else the catalog's model size
    pa, pb = (p or (m.params if m else 0) or w.params for p, m, w in zip(params, solo_ms, sides, strict=True))
    params = (pa, pb)
    sig = solo_a.profile.signature
    row = {
        "gpu": sig.gpu,
        **_side("a", a.workload, solo_a.profile, int(params[0]), colo[0]),
        **_side("b", b.workload, solo_b.profile, int(params[1]), colo[1]),
        "gpu_mem_mib": float(sig.gpu_mem_mib),
        "source": "measured",
    }
    return PairResult({c: row[c] for c in COLUMNS}, stratum(a, b), mps_env is not None, fitted)


def _null_nan(value: object) -> object:
    return None if isinstance(value, float) and math.isnan(value) else value


def rows_frame(rows: Sequence[Mapping[str, object]]) -> pl.DataFrame:
    """Rows in contract order; unknown (NaN) counters become nulls, which the contract calls empty."""
    return pl.DataFrame([{c: _null_nan(r.get(c)) for c in COLUMNS} for r in rows], schema=SCHEMA)


def append_rows(path: Path, rows: Sequence[Mapping[str, object]]) -> int:
    """Append to a co-location dataset (CSV or parquet by suffix); an existing file must follow the contract."""
    new = rows_frame(rows)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise SpecError("unknown dataset format (want .csv or .parquet)", where=f"dataset {str(path)!r}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"not writable ({type(exc).__name__})", where=f"dataset {str(path)!r}") from None
    if path.exists():
        try:
            old = pl.read_csv(path, schema_overrides=SCHEMA) if suffix == ".csv" else pl.read_parquet(path)
            absent = [pl.lit(None, dtype=SCHEMA[c]).alias(c) for c in OPTIONAL if c not in old.columns]
            old = old.with_columns(absent).select([pl.col(c).cast(t) for c, t in SCHEMA.items()])
        except Exception as exc:  # foreign or damaged file: refuse to append rather than corrupt it
            raise SpecError(f"existing file does not follow the co-location contract ({type(exc).__name__}: {str(exc)[:120]})",
                            where=f"dataset {str(path)!r}") from None  # fmt: skip
        new = pl.concat([old, new])
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    if suffix == ".csv":
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
        "measure_s": cfg.windows.measure_s,
        "dataset": str(out),
    }
    results: list[PairResult] = []
    try:
        with lineage.run(COLOCATION_EXPERIMENT, name, params) as run:
            for i, (a, b) in enumerate(pairs):
                if on_pair:
                    on_pair(i, len(pairs), a, b, "measuring")
                res = measure_pair(a, b, cfg, store, probe, run.id)
                append_rows(out, [res.row])
                results.append(res)
                sa, sb = res.slowdowns
                run.log_metrics({"slowdown_a": sa if math.isfinite(sa) else 0.0, "slowdown_b": sb if math.isfinite(sb) else 0.0,
                                 "fitted": float(res.fitted)}, step=i)  # fmt: skip
                if on_pair:
                    on_pair(i, len(pairs), a, b, f"slowdown {sa:.2f} / {sb:.2f}" if res.fitted else "did not fit")
            run.log_metrics({"pairs_measured": len(results), "mps": float(any(r.mps for r in results))})
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
