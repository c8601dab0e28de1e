"""Measured throughputs and OOM kills flow back into the profile store (the controller is its only writer).

Why the controller and not the launcher: the parquet store is rewritten file by file (read, merge,
atomic replace); concurrent writers from many Airflow workers would lose each other's rows. Launchers
report into the database (``JobService.report_*``); the controller folds the reports into the store
before planning, then marks them ``fed``. A crash between the upsert and the mark repeats the upsert,
which replaces the same key with the same values: idempotent.

Which reports become profile rows: OOM kills always (memory raised, ``faults.corrected_profile``);
throughputs only from jobs that ran alone — a profile is an *isolated* throughput, and a co-located
measurement is slowed by its partner (those rows stay in ``elastico_measurements`` for the predicted
against measured comparison and IAC training).

A report is what a job says about itself (in Airflow it comes from the workload's own progress file), so
it is never trusted to be sane: each row it would write passes the store's checks (``rst.quarantine``,
physical bounds included) and a refused one stays a database record only, marked fed with the reason.
One job's report can thus never fail, or skew the planning of, another job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from elastico_core.model.errors import ElasticoError
from elastico_core.model.hardware import HardwareSignature, gpu_model
from elastico_core.model.job import JobSpec
from elastico_core.model.knobs import Knobs
from elastico_core.model.profile import Profile
from elastico_core.rst.store import ProfileStore, now_iso
from elastico_core.state.db import StateStore
from elastico_core.state.faults import corrected_profile, measured_profile
from elastico_core.state.models import Measurement

BATCH = 1000


@dataclass(frozen=True, slots=True)
class FeedbackResult:
    upserted: int  # profile rows written
    corrections: int  # of which OOM corrections
    skipped: int  # reports kept in the database only (co-located, unknown workload, ...)
    notes: tuple[str, ...] = ()


def feed_profiles(
    state: StateStore,
    profiles: ProfileStore,
    spec_of: Callable[[str], JobSpec | None],
    *,
    include_throughput: bool = True,
) -> FeedbackResult:
    """Fold unfed reports into ``profiles``; ``spec_of(job_id)`` gives the job's spec (for its workload)."""
    kinds = ["oom", "progress", "final"] if include_throughput else ["oom"]

    def read(conn: Connection) -> list[Mapping[str, Any]]:
        stmt = (
            sa.select(Measurement.__table__)
            .where(Measurement.fed.is_(False), Measurement.kind.in_(kinds))
            .order_by(Measurement.id)
            .limit(BATCH)
        )
        return [dict(r) for r in conn.execute(stmt).mappings()]

    rows = state.read(read)
    if not rows:
        return FeedbackResult(0, 0, 0)
    at = now_iso()
    out: dict[tuple[str, str, str], Profile] = {}
    source: dict[tuple[str, str, str], list[int]] = {}  # profile key -> the reports it came from
    notes: dict[int, str] = {}
    for r in rows:
        spec = spec_of(r["job_id"])
        if spec is None or not r["signature"]:
            notes[r["id"]] = "skipped: job spec or GPU unknown"
            continue
        try:
            made = _profile_of(r, spec, profiles, at)
        except (ElasticoError, ValueError, TypeError, ArithmeticError) as exc:  # a report that describes nothing sane
            notes[r["id"]] = f"quarantined: {str(exc)[:300]}"
            continue
        if isinstance(made, str):
            notes[r["id"]] = made
            continue
        key = (made.workload, made.knobs.to_json(), made.signature.key)
        out[key] = made
        source.setdefault(key, []).append(r["id"])
        notes[r["id"]] = (f"memory corrected to {made.resources.gpu_mem_mib:.0f} MiB" if r["kind"] == "oom"
                          else "measured throughput stored")
    result = profiles.upsert(list(out.values()), measured_on="elastico-controller", where="launcher report")
    keys = list(out)
    for refused in result.refused:  # its row number is its place in ``out``
        for mid in source.get(keys[refused.row], ()):
            notes[mid] = f"quarantined: {refused.reason}"

    def mark(conn: Connection) -> None:
        conn.execute(
            sa.update(Measurement).where(Measurement.id == sa.bindparam("mid")).values(fed=True, fed_note=sa.bindparam("note")),
            [{"mid": r["id"], "note": notes.get(r["id"], "")} for r in rows],
        )

    state.write(mark)
    stored = {r["id"] for r in rows if notes.get(r["id"], "").startswith(("memory", "measured"))}
    corrections = sum(1 for r in rows if r["id"] in stored and r["kind"] == "oom")
    said = sorted({n for n in notes.values() if n.startswith("skipped")})
    said += [f"report {r['id']} of job {r['job_id']!r} {notes[r['id']]}" for r in rows
             if notes.get(r["id"], "").startswith("quarantined")]
    said += [f"unreadable profile file moved aside: {m}" for m in result.moved_aside]
    return FeedbackResult(result.written, corrections, len(rows) - len(stored), tuple(said))


def _profile_of(r: Mapping[str, Any], spec: JobSpec, profiles: ProfileStore, at: str) -> Profile | str:
    """The profile row one report makes, or why it makes none."""
    model = gpu_model(r["gpu_model"])
    signature = HardwareSignature.from_key(r["signature"])
    knobs = Knobs.of(r["knobs"])
    base = profiles.lookup(spec.workload, knobs, model, signature)
    if base is None:
        return "skipped: no profile to correct"
    if r["kind"] == "oom":
        return corrected_profile(base, signature, model, float(r["budget_mib"] or 0.0), r["observed_mem_mib"], at)
    if r["colocated"]:
        return "kept: co-located throughput is not an isolated profile"
    if r["throughput"] is None:
        return "skipped: no throughput"
    return measured_profile(base, signature, float(r["throughput"]), r["observed_mem_mib"], at)
