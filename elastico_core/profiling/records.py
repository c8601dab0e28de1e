"""Measurements as the measuring side writes them: JSON lines, and co-location rows in the dataset contract.

The part of profiling that runs next to a GPU writes plain records (``measurements.jsonl``); the planning
side folds them into the profile store (``elastico profiles import``), where polars lives. Standard
library only, so a bare CUDA image (python, torch, numpy, psutil, nvidia-ml-py) can write them.

Record kinds (the ``record`` field): ``run`` (what ran where, first line), ``solo`` (one configuration
alone: a profile row), ``pair`` (a co-located pair, interleaved: a co-location row with its spread),
``memcap`` (a memory-cap check), ``error`` (a measurement that failed; the run goes on).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastico_core.model.errors import SpecError

RUN, SOLO, PAIR, MEMCAP, ERROR = "run", "solo", "pair", "memcap", "error"
RECORD_KINDS = (RUN, SOLO, PAIR, MEMCAP, ERROR)

# ---- the co-location dataset contract (DESIGN.md), in column order ----------------------------------------
COUNTERS = ("sm_active", "sm_occupancy", "dram_active", "fb_used_mb", "tensor_active")
SIDE_COLUMNS = ("workload", "kind", "knobs", "params", "solo_tput", "colo_tput", *COUNTERS)
SPREAD_COLUMNS = ("repeats", "slowdown_min", "slowdown_max")  # optional: the interleaved protocol's spread
OPTIONAL = ("gpu_mem_mib", "source", *(f"{c}_{x}" for x in ("a", "b") for c in SPREAD_COLUMNS))
COLUMNS: tuple[str, ...] = ("gpu", *(f"{c}_{x}" for x in ("a", "b") for c in SIDE_COLUMNS), *OPTIONAL)
STRING_COLUMNS = frozenset(("gpu", "source", "workload_a", "workload_b", "kind_a", "kind_b", "knobs_a", "knobs_b"))
INT_COLUMNS = frozenset(("params_a", "params_b", "repeats_a", "repeats_b"))


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def finite_or_none(value: object) -> object:
    """JSON has no NaN: unknown figures are written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


@dataclass
class RecordWriter:
    """Appends one JSON object per line and syncs it, so a run cut short keeps every finished record."""

    path: Path

    def write(self, kind: str, /, **fields: Any) -> dict[str, Any]:
        record = {"record": kind, **finite_or_none(fields)}  # type: ignore[dict-item]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, separators=(",", ":"), sort_keys=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return record


def read_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for each well-formed record; a torn last line (a run cut short) is skipped."""
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise SpecError(f"cannot read ({exc.strerror or type(exc).__name__})", where=str(path)) from None
    with fh:
        try:
            lines = fh.readlines()
        except UnicodeDecodeError:
            raise SpecError("not a UTF-8 text file (want JSON lines)", where=str(path)) from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) and not line.endswith("\n"):
                continue  # torn last line
            raise SpecError("not a JSON object", where=f"{path}:{i}") from None
        if not isinstance(obj, dict) or obj.get("record") not in RECORD_KINDS:
            raise SpecError(f"not a measurement record (want record in {list(RECORD_KINDS)})", where=f"{path}:{i}")
        yield i, obj


def write_colocation_csv(path: Path, rows: Sequence[Mapping[str, object]]) -> None:
    """The whole dataset rewritten atomically (rows in contract order; unknown values empty)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for row in rows:
            w.writerow(["" if (v := finite_or_none(row.get(c))) is None else v for c in COLUMNS])
    os.replace(tmp, path)
