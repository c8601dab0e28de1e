"""A running job's progress and ETA from its launcher's latest report: pure arithmetic, one wording.

The report says how many steps the workload took and how much work (samples or generated tokens) it did,
how many steps it will take in all when it knows (``--steps``, a shard's rows), and its latest measured
rate. The job spec's ``work`` (an amount of work) is the other way to know the total. ``jobs list``,
``jobs show`` and the status page all print ``describe``, so they agree to the character.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Eta:
    """How far a job is (``fraction`` 0..1, None when no total is known) and the seconds left at its rate."""

    fraction: float | None
    remaining_s: float | None


def estimate(steps: int, done: float, total_steps: int | None, work: float | None, rate: float | None,
             elapsed_s: float = 0.0) -> Eta:
    """Fraction done (as reported) and time left. ``elapsed_s``: seconds since the report (the job kept going).

    With a step total, work left is the steps left times the work per step so far; with a spec's ``work``,
    the work left directly; the time left is that over the latest rate.
    """
    fraction: float | None = None
    left: float | None = None
    if total_steps and total_steps > 0:
        fraction = min(1.0, max(0.0, steps / total_steps))
        if steps > 0 and done > 0:
            left = done / steps * max(0, total_steps - steps)
    elif work and work > 0:
        fraction = min(1.0, max(0.0, done / work))
        left = max(0.0, work - done)
    remaining = None
    if left is not None and rate and rate > 0 and math.isfinite(rate):
        remaining = max(0.0, left / rate - max(0.0, elapsed_s))
    return Eta(fraction, remaining)


def duration(seconds: float | None) -> str:
    """``45 s``, ``12 min``, ``3.5 h``, ``2.1 d``; ``–`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def describe(steps: int, total_steps: int | None, eta: Eta, items: str = "steps") -> str:
    """``12/20 steps (60%), ETA 3 min`` — or ``12 steps`` when no total is known (``items``: what the
    workload counts, training steps or a shard's rows)."""
    head = f"{steps}/{total_steps} {items}" if total_steps else f"{steps} {items}"
    if eta.fraction is not None:
        head += f" ({100 * eta.fraction:.0f}%)"
    if eta.remaining_s is not None:
        head += f", ETA {duration(eta.remaining_s)}"
    return head
