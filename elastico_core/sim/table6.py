"""Table 6 of the paper: representative co-location pairs and their measured decays (data only).

Each row is ``(workload_a, change_a, workload_b, change_b, decay_a, decay_b)`` where the change is
applied to the workload's default configuration: ``""`` (default, the table's circle), ``"pc"``
(prefix caching on) or ``"ck"`` (activation checkpointing on). Decay = co-located / solo throughput.
"""

from __future__ import annotations

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
