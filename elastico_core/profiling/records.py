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
MAX_RECORD_CHARS = 1 << 20  # gpucheck writes lines of ~2 kB; a longer line is refused without being held

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


def _lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, whether it ended with a newline), one line in memory at a time.

    :raises SpecError: a line longer than ``MAX_RECORD_CHARS`` (a 1 GB line must not take 2 GB to refuse).
    """
    try:
        fh = open(path, encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise SpecError(f"cannot read ({exc.strerror or type(exc).__name__})", where=str(path)) from None
    with fh:
        i = 0
        while True:
            i += 1
            try:
                line = fh.readline(MAX_RECORD_CHARS + 1)
            except UnicodeDecodeError:
                raise SpecError("not a UTF-8 text file (want JSON lines)", where=str(path)) from None
            except OSError as exc:
                raise SpecError(f"cannot read ({exc.strerror or type(exc).__name__})", where=str(path)) from None
            if not line:
                return
            if len(line) > MAX_RECORD_CHARS:
                raise SpecError(f"longer than {MAX_RECORD_CHARS:,} characters (not a measurement record)", where=f"{path}:{i}")
            yield i, line, line.endswith("\n")


def read_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for each well-formed record; a torn last line (a run cut short) is skipped."""
    pending: tuple[int, str] | None = None  # a line that did not parse: an error unless it is the torn last one
    for i, line, ended in _lines(path):
        if pending is not None:
            raise SpecError("not a JSON object", where=f"{path}:{pending[0]}")
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:  # deep nesting, 5,000-digit numbers
            if isinstance(exc, json.JSONDecodeError) and not ended:
                pending = (i, line)  # torn last line, if nothing follows
                continue
            raise SpecError(f"not a JSON object ({type(exc).__name__})", where=f"{path}:{i}") from None
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
