"""Table 6 of the paper, the one copy: its measured pairs, and the workload-level lookup built from them.

Each row is ``(workload_a, change_a, workload_b, change_b, decay_a, decay_b)`` where the change is
applied to the workload's default configuration: ``""`` (default, the table's circle), ``"pc"``
(prefix caching on) or ``"ck"`` (activation checkpointing on). Decay = co-located / solo throughput.
The planner's fallback predictor (no learned model yet) and the simulator's Table-6 truth and
predictor all read these rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from elastico_core.iac.predictor import TableLookup

TABLE6: tuple[tuple[str, str, str, str, float, float], ...] = (
    # severe
    ("qwen-1.7b", "", "resnet50", "", 0.48, 0.55),
    ("bert", "", "bert", "ck", 0.47, 0.57),
    ("deepseek-1.5b", "pc", "resnet50", "ck", 0.50, 0.56),
    # high
    ("qwen-1.7b", "pc", "resnet50", "", 0.52, 0.57),
    ("ppo", "", "resnet50", "", 0.54, 0.72),
    ("qwen-1.7b", "", "resnet50", "ck", 0.66, 0.57),
    ("deepseek-1.5b", "", "resnet50", "ck", 0.67, 0.61),
    # moderate
    ("qwen-1.7b", "", "resnet50", "", 0.71, 0.68),
    ("deepseek-1.5b", "", "ppo", "", 0.56, 0.89),
    ("lstm", "", "resnet50", "ck", 0.70, 0.70),
    ("lstm", "", "ncf", "", 0.75, 0.55),
    ("qwen-1.7b", "pc", "deepseek-1.5b", "pc", 0.60, 0.62),
    ("llama-3-7b", "pc", "mistral-7b", "pc", 0.58, 0.61),
    # low
    ("qwen-1.7b", "", "ncf", "", 0.93, 0.95),
    ("bert", "ck", "deepseek-1.5b", "", 0.95, 0.96),
    # near-zero
    ("ncf", "", "ppo", "", 0.97, 0.98),
    ("bert", "", "ppo", "", 0.98, 0.98),
    ("ncf", "", "bert", "", 0.99, 0.99),
)

UNKNOWN_PAIR_SLOWDOWN = 1.15  # a pair Table 6 does not name: assume moderate contention (decay ~0.87)


def table6_decays() -> Mapping[tuple[str, str], tuple[float, float]]:
    """(a, b) with a <= b -> (decay of a, decay of b), averaged over the rows of that workload pair
    (its configuration flags folded)."""
    sums: dict[tuple[str, str], list[float]] = {}
    for a, _ka, b, _kb, da, db in TABLE6:
        key, vals = ((a, b), (da, db)) if a <= b else ((b, a), (db, da))
        acc = sums.setdefault(key, [0.0, 0.0, 0.0])
        acc[0] += vals[0]
        acc[1] += vals[1]
        acc[2] += 1
    return MappingProxyType({k: (v[0] / v[2], v[1] / v[2]) for k, v in sums.items()})


def table6_predictor(default: float = UNKNOWN_PAIR_SLOWDOWN) -> TableLookup:
    """S(a|b) = 1 / decay for every ordered workload pair of Table 6; ``default`` for the others."""
    return TableLookup.from_decays(table6_decays(), default=default, name="table6")
