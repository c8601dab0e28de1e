"""Co-location dataset rows (DESIGN.md contract) from an interleaved pair measurement.

Each side's solo and co-located throughput are the medians of windows of the same run (see
``profiling.windows``); the optional spread columns say how many repeats there were and how far
their slowdowns lay apart. Counters are the side's solo windows' device counters on a GPU, its CPU
share on a CPU device. A row whose median slowdown stayed below 0.97 is ``source=suspect``.
Measuring side: standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from elastico_core.profiling.gpu_probe import GpuSample
from elastico_core.profiling.pairs import Candidate
from elastico_core.profiling.windows import PairFigures

GPU_COUNTERS = ("sm_active", "sm_occupancy", "dram_active", "tensor_active")


def mean_counters(samples: Sequence[GpuSample]) -> dict[str, float]:
    """Each counter's mean over the samples that know it (NaN when none does)."""

    def avg(name: str) -> float:
        xs = [getattr(g, name) for g in samples if math.isfinite(getattr(g, name))]
        return sum(xs) / len(xs) if xs else math.nan

    return {k: avg(k) for k in GPU_COUNTERS}


@dataclass(frozen=True, slots=True)
class RowDevice:
    """The device a pair shared, as the row names it."""

    gpu: str  # the signature's GPU name (``h200-141gb``, ``cpu-amd-epyc``)
    gpu_mem_mib: float
    cpu_cores: int | None = None  # a CPU device: its cores (counters are then CPU shares)


def _side(x: str, c: Candidate, params: int) -> dict[str, object]:
    return {f"workload_{x}": c.workload.name, f"kind_{x}": c.workload.kind.value, f"knobs_{x}": c.knobs.to_json(),
            f"params_{x}": params or c.workload.params}  # fmt: skip


def pair_row(dev: RowDevice, a: Candidate, b: Candidate, fig: PairFigures, params: tuple[int, int]) -> dict[str, object]:
    row: dict[str, object] = {"gpu": dev.gpu}
    for x, c, s, p in (("a", a, fig.a, params[0]), ("b", b, fig.b, params[1])):
        if dev.cpu_cores is None:
            counters = mean_counters(fig.solo_gpu(x))
        else:
            busy = [w.cpu_cores for w in s.solo_windows]
            counters = {k: math.nan for k in GPU_COUNTERS}
            counters["sm_active"] = min(1.0, sum(busy) / len(busy) / dev.cpu_cores) if busy else math.nan
        fb = max((w.mem_mib for w in s.solo_windows if math.isfinite(w.mem_mib)), default=math.nan)
        row.update(_side(x, c, p))
        row.update({
            f"solo_tput_{x}": s.solo_tput, f"colo_tput_{x}": s.colo_tput, f"fb_used_mb_{x}": fb,
            **{f"{k}_{x}": v for k, v in counters.items()},
            f"repeats_{x}": s.repeats, f"slowdown_min_{x}": s.slowdown_min, f"slowdown_max_{x}": s.slowdown_max,
        })  # fmt: skip
    row["gpu_mem_mib"] = float(dev.gpu_mem_mib)
    row["source"] = "suspect" if fig.suspect else "measured"
    return row


def did_not_fit_row(dev: RowDevice, a: Candidate, b: Candidate, solo: tuple[float, float]) -> dict[str, object]:
    """The contract's "did not fit": the pair ran out of device memory together (colo_tput 0 on both sides).

    ``solo`` is each side's throughput alone from elsewhere (the pair never ran long enough to measure it)."""
    row: dict[str, object] = {"gpu": dev.gpu, **_side("a", a, 0), **_side("b", b, 0)}
    for x, t in zip(("a", "b"), solo, strict=True):
        row.update({f"solo_tput_{x}": t, f"colo_tput_{x}": 0.0})
    row.update({"gpu_mem_mib": float(dev.gpu_mem_mib), "source": "measured"})
    return row
