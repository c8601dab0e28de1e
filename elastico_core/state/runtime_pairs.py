"""Runtime pairs: co-location training rows from what the running cluster already measured.

Every throughput report (``elastico_measurements``, kind ``progress``/``final``) names the job, its
configuration, the GPU and whether the job shared it. A job's co-located reports on a GPU, taken while
exactly one other job also reported co-located on that GPU, are one side of a pair; the partner's
reports over the same time are the other side. Each side's slowdown compares its co-located throughput
with its throughput alone *on the same hardware signature at the same configuration*:

1. best, the same job's own reports alone (before the partner arrived or after it left): the same
   process on the same data, the cleanest comparison there is;
2. else a measured solo row of the profile store (``source=measured``, that signature);
3. else no row (counted in ``CollectResult.skipped`` with the reason): an estimate is not a measurement.

A row carries ``source=runtime``, the two jobs, the signature, the co-located window (first and last
report, ISO UTC), and the co-location contract's spread columns (``repeats_x`` = co-located reports,
``slowdown_min_x``/``slowdown_max_x`` over them). A pair whose median slowdown is below 0.97 on a side
(faster together than alone beyond noise) is ``source=suspect``, as the profiler marks its own rows:
kept in the file, skipped by training. Reading only: nothing in the state changes.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from elastico_core.iac.dataset import CoLocationDataset, validate
from elastico_core.model.errors import ElasticoError
from elastico_core.model.hardware import HardwareSignature, gpu_model
from elastico_core.model.knobs import Knobs
from elastico_core.model.profile import Source
from elastico_core.rst.store import ProfileStore
from elastico_core.state.db import StateStore
from elastico_core.state.models import Job, Measurement

SUSPECT_BELOW = 0.97  # the profiler's rule: a median slowdown below this is a measurement error
MATCH_S = 120.0  # a partner's report within this many seconds of a job's counts as the same co-location


@dataclass(frozen=True, slots=True)
class Report:
    job: str
    workload: str
    knobs: str  # canonical JSON
    gpu_id: str
    gpu_model: str
    signature: str
    throughput: float
    colocated: bool
    at: dt.datetime


@dataclass(frozen=True, slots=True)
class CollectResult:
    dataset: CoLocationDataset | None  # None when no pair could be built
    pairs: int
    suspect: int
    skipped: Mapping[str, int]  # reason -> co-located windows that gave no row


def _reports(conn: Connection) -> list[Report]:
    stmt = (
        sa.select(Measurement.job_id, Measurement.workload, Measurement.knobs, Measurement.gpu_id, Measurement.gpu_model,
                  Measurement.signature, Measurement.throughput, Measurement.colocated, Measurement.at)
        .where(Measurement.kind.in_(["progress", "final"]), Measurement.throughput.is_not(None))
        .order_by(Measurement.at, Measurement.id)
    )
    out = []
    for r in conn.execute(stmt):
        if r.throughput is None or not r.throughput > 0 or not r.gpu_id:
            continue
        out.append(Report(r.job_id, r.workload, Knobs.of(r.knobs or {}).to_json(), r.gpu_id, r.gpu_model, r.signature or "",
                          float(r.throughput), bool(r.colocated), r.at))
    return out


def _jobs(conn: Connection, ids: set[str]) -> dict[str, Mapping[str, Any]]:
    if not ids:
        return {}
    rows = conn.execute(sa.select(Job.id, Job.kind, Job.spec).where(Job.id.in_(sorted(ids))))
    return {r.id: {"kind": r.kind, "spec": r.spec} for r in rows}


def _params(spec: Mapping[str, Any] | None, workload: str) -> float | None:
    from elastico_core.rst.catalog import PAPER_WORKLOADS

    w = PAPER_WORKLOADS.get(workload)
    if w is not None:
        return float(w.params)
    raw = (spec or {}).get("workload") if isinstance(spec, Mapping) else None
    if isinstance(raw, Mapping) and isinstance(raw.get("params"), (int, float)) and raw["params"] > 0:
        return float(raw["params"])
    return None


def collect_runtime_pairs(state: StateStore, profiles: ProfileStore | None = None, *, match_s: float = MATCH_S) -> CollectResult:
    """Every co-located window the state recorded, as contract rows (see the module doc)."""
    reports = state.read(_reports)
    by_gpu: dict[str, list[Report]] = defaultdict(list)
    by_job: dict[str, list[Report]] = defaultdict(list)
    for r in reports:
        by_gpu[r.gpu_id].append(r)
        by_job[r.job].append(r)
    # each co-located report -> its partner: the one other job reporting co-located on that GPU near then
    windows: dict[tuple[str, str, str, str, str], list[Report]] = defaultdict(list)  # (gpu, a, b, knobs a, knobs b)
    skipped: dict[str, int] = defaultdict(int)
    for gpu, rows in by_gpu.items():
        for r in rows:
            if not r.colocated:
                continue
            near = {o.job: o for o in rows if o.colocated and o.job != r.job and abs((o.at - r.at).total_seconds()) <= match_s}
            if len(near) != 1:
                skipped["no single partner reporting at the same time" if not near else "more than one partner"] += 1
                continue
            partner = next(iter(near.values()))
            windows[(gpu, r.job, partner.job, r.knobs, partner.knobs)].append(r)
    jobs = state.read(lambda c: _jobs(c, set(by_job)))
    out: list[dict[str, object]] = []
    done: set[tuple[str, ...]] = set()
    for (gpu, a, b, ka, kb), colo_a in windows.items():
        key = (gpu, *sorted([(a, ka), (b, kb)])[0], *sorted([(a, ka), (b, kb)])[1])
        if key in done:
            continue
        done.add(key)
        colo_b = windows.get((gpu, b, a, kb, ka), [])
        if not colo_b:
            skipped["the partner's side was not reported"] += 1
            continue
        sides = []
        for job, colo in ((a, colo_a), (b, colo_b)):
            ref = colo[0]
            solo = _solo(by_job[job], ref, profiles)
            if solo is None:
                skipped["no solo throughput on that signature"] += 1
                break
            params = _params(jobs.get(job, {}).get("spec"), ref.workload)
            if params is None:
                skipped["unknown parameter count"] += 1
                break
            sides.append((job, ref, solo, params, str(jobs.get(job, {}).get("kind", "train")), colo))
        if len(sides) != 2:
            continue
        out.append(_row(sides))
    if not out:
        return CollectResult(None, 0, 0, dict(skipped))
    ds = validate(pl.DataFrame(out, infer_schema_length=None), origin="runtime pairs")
    suspect = int((ds.frame["source"] == "suspect").sum())
    return CollectResult(ds, ds.rows, suspect, dict(skipped))


def _solo(history: list[Report], ref: Report, profiles: ProfileStore | None) -> float | None:
    """The job's throughput alone at the same configuration and signature: its own reports, else a measured row."""
    alone = [r.throughput for r in history if not r.colocated and r.knobs == ref.knobs and r.signature == ref.signature]
    if alone:
        return float(statistics.median(alone))
    if profiles is None or not ref.signature:
        return None
    try:
        model = gpu_model(ref.gpu_model)
        sig = HardwareSignature.from_key(ref.signature)
        from elastico_core.rst.catalog import PAPER_WORKLOADS

        w = PAPER_WORKLOADS.get(ref.workload)
        if w is None:
            return None
        p = profiles.lookup(w, Knobs.from_json(ref.knobs), model, sig)
    except (ElasticoError, ValueError):
        return None
    if p is None or p.source is not Source.MEASURED or p.signature.key != ref.signature:
        return None
    return float(p.throughput)


def _row(sides: list[tuple[str, Report, float, float, str, list[Report]]]) -> dict[str, object]:
    row: dict[str, object] = {}
    suspect = False
    starts, ends = [], []
    for x, (job, ref, solo, params, kind, colo) in zip(("a", "b"), sides, strict=True):
        slow = [solo / r.throughput for r in colo]
        tput = float(statistics.median(r.throughput for r in colo))
        suspect |= solo / tput < SUSPECT_BELOW
        starts.append(min(r.at for r in colo))
        ends.append(max(r.at for r in colo))
        row.update({
            f"workload_{x}": ref.workload, f"kind_{x}": kind, f"knobs_{x}": ref.knobs, f"params_{x}": params,
            f"solo_tput_{x}": solo, f"colo_tput_{x}": tput, f"job_{x}": job,
            f"repeats_{x}": float(len(colo)), f"slowdown_min_{x}": min(slow), f"slowdown_max_{x}": max(slow),
        })  # fmt: skip
    ref = sides[0][1]
    try:
        mem: float | None = float(gpu_model(ref.gpu_model).memory_mib)
        gpu = gpu_model(ref.gpu_model).name
    except ElasticoError:
        mem, gpu = None, ref.gpu_model
    row.update({"gpu": gpu, "gpu_mem_mib": mem, "signature": ref.signature, "source": "suspect" if suspect else "runtime",
                "window_start": min(starts).isoformat(), "window_end": max(ends).isoformat()})
    return row
