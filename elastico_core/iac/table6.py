"""Table 6's measured pairs as a workload-level lookup: the predictor when no learned model exists."""

from __future__ import annotations

from collections import defaultdict

from elastico_core.iac.predictor import TableLookup

# (workload A, workload B, decay A, decay B): every row of Table 6, configuration flags folded
# (rows of one workload pair under different PC/CK flags are averaged).
TABLE6_ROWS: tuple[tuple[str, str, float, float], ...] = (
    ("qwen-1.7b", "resnet50", 0.48, 0.55),
    ("bert", "bert", 0.47, 0.57),
    ("deepseek-1.5b", "resnet50", 0.50, 0.56),
    ("qwen-1.7b", "resnet50", 0.52, 0.57),
    ("ppo", "resnet50", 0.54, 0.72),
    ("qwen-1.7b", "resnet50", 0.66, 0.57),
    ("deepseek-1.5b", "resnet50", 0.67, 0.61),
    ("qwen-1.7b", "resnet50", 0.71, 0.68),
    ("deepseek-1.5b", "ppo", 0.56, 0.89),
    ("lstm", "resnet50", 0.70, 0.70),
    ("lstm", "ncf", 0.75, 0.55),
    ("qwen-1.7b", "deepseek-1.5b", 0.60, 0.62),
    ("llama-3-7b", "mistral-7b", 0.58, 0.61),
    ("qwen-1.7b", "ncf", 0.93, 0.95),
    ("bert", "deepseek-1.5b", 0.95, 0.96),
    ("ncf", "ppo", 0.97, 0.98),
    ("bert", "ppo", 0.98, 0.98),
    ("ncf", "bert", 0.99, 0.99),
)
UNKNOWN_PAIR_SLOWDOWN = 1.15  # a pair Table 6 does not name: assume moderate contention (decay ~0.87)


def table6_predictor(default: float = UNKNOWN_PAIR_SLOWDOWN) -> TableLookup:
    """S(a|b) = 1 / decay, averaged over Table 6's rows for each ordered workload pair."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(list)
    for a, b, da, db in TABLE6_ROWS:
        sums[(a, b)].append(1.0 / da)
        sums[(b, a)].append(1.0 / db)
    return TableLookup(table={k: sum(v) / len(v) for k, v in sums.items()}, default=default, name="table6")
