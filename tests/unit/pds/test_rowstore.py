"""The row store's epoch table equals every option set padded into (J, K) arrays, whatever the order
in which jobs arrive, change and leave (slots are reused, columns widen)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from elastico_core.bench.instances import make_cluster
from elastico_core.model import JobSpec
from elastico_core.pds.options import EpochTable, OptionCompiler, OptionSet, RowStore
from elastico_core.rst.catalog import PAPER_WORKLOADS as W
from elastico_core.rst.store import ProfileStore


def _padded(sets: list[OptionSet], weights: list[float], current: list[int], switch: list[np.ndarray | None]) -> dict[str, np.ndarray]:
    """The oracle: each field written option by option into arrays filled as an absent option reads."""
    n, width = len(sets), max((len(s.knobs) for s in sets), default=0) or 1
    out = {
        "valid": np.zeros((n, width), dtype=bool), "model": np.zeros((n, width), dtype=np.int64),
        "dp": np.ones((n, width), dtype=np.int64), "switch": np.zeros((n, width)),
        **{c: np.zeros((n, width)) for c in ("value", "mem", "sm", "cpu", "host", "throughput")},
    }
    for j, s in enumerate(sets):
        for k in range(len(s.knobs)):
            out["valid"][j, k] = True
            out["model"][j, k], out["dp"][j, k] = s.model[k], s.dp[k]
            out["value"][j, k] = s.value[k] * weights[j]
            for c in ("mem", "sm", "cpu", "host", "throughput"):
                out[c][j, k] = getattr(s, c)[k]
            if switch[j] is not None:
                out["switch"][j, k] = switch[j][k] * weights[j]  # type: ignore[index]  # per unit of w_j, scaled by the row
    out["weight"], out["current"] = np.array(weights), np.array(current, dtype=np.int64)
    return out


NAMES = sorted(W)
events = st.lists(st.tuples(st.sampled_from(["put", "drop"]), st.integers(0, 11), st.sampled_from(NAMES), st.booleans()), max_size=40)


@settings(max_examples=40, deadline=None)
@given(events)
def test_the_table_is_every_option_set_padded(store: ProfileStore, seq: list[tuple[str, int, str, bool]]) -> None:
    compiler = OptionCompiler(make_cluster(4), store)
    rows = RowStore()
    live: dict[int, tuple[int, OptionSet, float, int, np.ndarray | None]] = {}  # job -> slot and what was written
    for op, job, workload, running in seq:
        if op == "drop":
            if job in live:
                rows.release(live.pop(job)[0])
            continue
        opts = compiler.options(JobSpec(f"j{job}", W[workload]))
        weight = 1.0 + job / 4
        current = len(opts.knobs) - 1 if running and len(opts.knobs) else -1
        switch = np.linspace(0.0, 1.0, len(opts.knobs)) if current >= 0 else None
        (slot,) = rows.put_many([(live[job][0] if job in live else -1, opts, weight, current, switch)])
        live[job] = (slot, opts, weight, current, switch)
    order = sorted(live)
    table = rows.table(np.array([live[j][0] for j in order], dtype=np.intp), [f"j{j}" for j in order], [live[j][1] for j in order])
    want = _padded([live[j][1] for j in order], [live[j][2] for j in order], [live[j][3] for j in order], [live[j][4] for j in order])
    assert isinstance(table, EpochTable) and table.job_ids == tuple(f"j{j}" for j in order)
    for field, expected in want.items():
        got = getattr(table, field)
        assert got.dtype == expected.dtype and got.shape == expected.shape, field
        assert np.array_equal(got, expected), field
    assert np.array_equal(table.running, want["current"] >= 0)
    assert len(set(s for s, *_ in live.values())) == len(live)  # no two live jobs share a slot
