"""Folding measurement records (``measurements.jsonl`` from gpucheck) into the profile store and the pair dataset.

The measuring side writes plain JSON lines next to the GPU; this is the planning side's reader. A
``solo`` record becomes a measured profile row under the hardware signature it carries; a ``pair``
record becomes a co-location dataset row. A record that cannot be used (unknown workload, an off-grid
knob, a throughput or memory figure that is not a finite positive number) is quarantined: skipped and
named with its file and line, never allowed to fail the rest of the import. A pair row is checked
against the co-location contract (``iac.dataset.validate``) here, before anything is written, so an
import is never left half done by a bad pair after its solo rows went in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastico_core.model.errors import ElasticoError, SpecError
from elastico_core.model.hardware import HardwareSignature
from elastico_core.model.knobs import Knobs, check_knob_value
from elastico_core.model.profile import Counters, Profile, Source
from elastico_core.model.resources import ResourceVector
from elastico_core.profiling.configs import find_workload, resolve_knobs
from elastico_core.profiling.records import COUNTERS, PAIR, SOLO, read_records


@dataclass(frozen=True, slots=True)
class Imported:
    """What a set of measurement files holds, ready for the store and the dataset."""

    profiles: tuple[tuple[Profile, str], ...]  # (row, host it was measured on)
    pairs: tuple[dict[str, object], ...]
    quarantined: tuple[str, ...]  # "file:line: why"
    records: int


def _num(rec: Mapping[str, Any], key: str, *, positive: bool = False, where: str) -> float:
    value = rec.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise SpecError(f"must be a finite number, got {value!r}", where=where, field=key)
    if value < 0 or (positive and value == 0):
        raise SpecError(f"must be {'> 0' if positive else '>= 0'}, got {value!r}", where=where, field=key)
    return float(value)


def _counter(raw: object) -> float:
    return float(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw) else math.nan


def signature_of(rec: Mapping[str, Any], where: str) -> HardwareSignature:
    sig = rec.get("signature")
    if not isinstance(sig, Mapping):
        raise SpecError("no hardware signature", where=where, field="signature")
    try:
        mem = sig["gpu_mem_mib"]
        if isinstance(mem, float) and mem.is_integer():
            mem = int(mem)
        return HardwareSignature(sig["gpu"], mem, sig["driver"], sig["framework"])
    except SpecError as exc:
        raise SpecError(exc.message, where=where, field=f"signature.{exc.field}") from None
    except (KeyError, TypeError, ValueError, OverflowError):
        raise SpecError(f"incomplete hardware signature {str(dict(sig))[:200]}", where=where, field="signature") from None


def profile_of(rec: Mapping[str, Any], where: str) -> Profile:
    """A measured profile row from a ``solo`` record (raises SpecError naming the field)."""
    knobs = rec.get("knobs")
    if not isinstance(knobs, Mapping):
        raise SpecError("not a JSON object", where=where, field="knobs")
    try:
        for name, value in knobs.items():
            check_knob_value(name, value)  # nested lists, 2**70, null: named, not a TypeError
        workload = find_workload(str(rec.get("workload") or "")[:200])
        resolved = resolve_knobs(workload, Knobs.of(dict(knobs)))
    except SpecError as exc:  # name the record, not only the field
        raise SpecError(exc.message, where=where, field=exc.field) from None
    counters = rec.get("counters") if isinstance(rec.get("counters"), Mapping) else {}
    assert isinstance(counters, Mapping)
    sm = _num(rec, "sm", where=where)
    if sm > 1:
        raise SpecError(f"must lie in 0..1, got {sm}", where=where, field="sm")
    return Profile(
        workload=workload.name,
        knobs=resolved,
        signature=signature_of(rec, where),
        resources=ResourceVector(
            sm=sm,
            gpu_mem_mib=_num(rec, "gpu_mem_mib", positive=True, where=where),
            cpu_cores=_num(rec, "cpu_cores", where=where),
            host_mem_mib=_num(rec, "host_mem_mib", where=where),
        ),
        throughput=_num(rec, "throughput", positive=True, where=where),
        unit=workload.unit,
        source=Source.MEASURED,
        counters=Counters(*(_counter(counters.get(c)) for c in COUNTERS)),
        measured_at=str(rec.get("measured_at") or ""),
        provenance=f"measured by gpucheck ({rec.get('scale', '?')} scale, {rec.get('window_s', '?')} s window)",
    )


def pair_of(rec: Mapping[str, Any], where: str) -> dict[str, object]:
    """A co-location dataset row from a ``pair`` record, checked against the contract (raises SpecError)."""
    from elastico_core.iac.dataset import validate
    from elastico_core.profiling.colocate import rows_frame

    row = rec.get("row")
    if not isinstance(row, Mapping):
        raise SpecError("no co-location row", where=where, field="row")
    try:
        frame = rows_frame([row])
    except Exception as exc:  # a value of the wrong type for its column (a list, 2**70, "abc")
        raise SpecError(f"does not follow the co-location contract ({type(exc).__name__})", where=where, field="row") from None
    try:
        validate(frame, origin=where)
    except SpecError as exc:
        raise SpecError(exc.message, where=where, field=exc.field) from None
    return dict(row)


def read_measurements(paths: Iterable[Path]) -> Imported:
    profiles: list[tuple[Profile, str]] = []
    pairs: list[dict[str, object]] = []
    quarantined: list[str] = []
    n = 0
    for path in paths:
        for line, rec in read_records(path):
            n += 1
            where = f"{path}:{line}"
            kind = rec.get("record")
            try:
                if kind == SOLO:
                    profiles.append((profile_of(rec, where), str(rec.get("host") or "")))
                elif kind == PAIR:
                    pairs.append(pair_of(rec, where))
            except ElasticoError as exc:
                quarantined.append(str(exc))
    return Imported(tuple(profiles), tuple(pairs), tuple(quarantined), n)


def measured_profiles(paths: Sequence[Path]) -> tuple[list[Profile], list[str]]:
    """Measured rows from profile-store parquet files or measurement JSON lines (for calibration)."""
    from elastico_core.rst.store import check_profiles, read_profile_rows, row_profile

    out: list[Profile] = []
    problems: list[str] = []
    for path in paths:
        if path.suffix.lower() == ".parquet":
            df, bad = read_profile_rows(path)
            out += [p for p in (row_profile(r) for r in df.iter_rows(named=True)) if p.source is Source.MEASURED]
            problems += [str(b) for b in bad]
        elif path.suffix.lower() in (".jsonl", ".json"):
            got = read_measurements([path])
            rows = [p for p, _ in got.profiles]
            _, bad = check_profiles(rows, str(path))  # the store's own checks, physical bounds included
            refused = {b.row for b in bad}
            out += [p for i, p in enumerate(rows) if i not in refused]
            problems += list(got.quarantined) + [str(b) for b in bad]
        else:
            raise SpecError("want a profile store file (.parquet) or measurement records (.jsonl)", where=str(path))
    return out, problems
