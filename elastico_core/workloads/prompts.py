"""Synthetic shards for profiling and tests: sonnet lines behind a shared prefix, as batch jobs have.

Offline batch jobs (labelling, evaluation) put one instruction or few-shot context in front of every
item; ``prefix_share`` of each prompt is that shared part (the workload's rho in Table 2's terms).
"""

from __future__ import annotations

import random

from elastico_core.workloads.corpus import lines


def synthetic_prompts(
    n: int, *, prompt_bytes: int = 128, prefix_share: float = 0.5, seed: int = 0
) -> list[dict[str, object]]:
    """``n`` rows ``{"id", "prompt"}``: a shared context of sonnet lines, then the first words of a line."""
    rng = random.Random(seed)
    text = lines()
    prefix, i = "", 0
    while len(prefix) < prompt_bytes * prefix_share:  # whole lines, so the model sees verse it knows
        prefix += text[i % len(text)] + "\n"
        i += 1
    rows: list[dict[str, object]] = []
    for k in range(n):
        line = text[rng.randrange(len(text))]
        words = line.split(" ")
        head = " ".join(words[: max(1, len(words) // 2)]) + " "  # the model is asked to finish the line
        rows.append({"id": f"p{k:06d}", "prompt": prefix + head})
    return rows
