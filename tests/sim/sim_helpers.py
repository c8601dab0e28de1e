"""Helpers of the simulator tests: tiny traces, CSV files, the public data folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from elastico_core.sim.trace import Trace, parse_rows

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / ".." / "shared" / "data"  # ../shared/data relative to the repository root
COLUMNS = ("job_id", "submit_time_s", "duration_s", "num_gpus", "kind", "workload", "user")


def make_trace(rows: Sequence[tuple[object, ...]], seed: int = 0, name: str = "tiny.csv") -> Trace:
    """Rows of (job_id, submit, duration, gpus, kind[, workload[, user]]) as a validated trace."""
    dicts = []
    for r in rows:
        d = {c: "" for c in COLUMNS}
        for c, v in zip(COLUMNS, r, strict=False):
            d[c] = str(v)
        dicts.append(d)
    return parse_rows(dicts, list(COLUMNS), name, seed)


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> Path:
    lines = [",".join(header)] + [",".join(str(x) for x in r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def need_data(*parts: str) -> Path:
    p = DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"public data not present: {p} (see ../shared/data/README.md)")
    return p
