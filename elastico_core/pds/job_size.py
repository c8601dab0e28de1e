"""Shorter jobs first: Eq. 1's w_j scaled by how long a job is expected to run.

The paper leaves w_j open ("e.g., inverse of remaining iterations"). On a full cluster the average JCT is
decided by who waits, and a queue served in arrival order makes every short job wait behind the long ones
that came first. So the planner scales each job's weight by ``(reference_s / t) ** exponent``, ``t`` the
job's work over the throughput of its fastest configuration (``JobSpec.work``: what the job says it will
process; unknown work leaves the weight as it is), and orders its waiting queue by that factor within a
priority, arrival order breaking ties. A larger weight lets a short job outbid a long one for the same
resources (Eq. 7) and places it first where what ESP chose does not all fit (``pds/packing.py``).

The factor is clipped to ``[1/cap, cap]`` and rounded to ``steps_per_octave`` steps per doubling: jobs of
similar length keep their arrival order, and no job outweighs another by more than ``cap ** 2``, so a long
job is never priced out for good by a stream of short ones. A running job is stopped for waiting ones only
past the outbid margin (``PlannerConfig.preempt_outbid``, ``Epoch.none_score``). Chosen by the rules sweep
(docs/simulator.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SizeWeights:
    """How a job's expected run time scales its weight (``exponent`` 0: not at all)."""

    exponent: float = 0.5
    reference_s: float = 1000.0  # a job of this expected run time keeps its weight (paper-mix's median)
    cap: float = 8.0
    steps_per_octave: int = 4

    def factor(self, work: float, best_throughput: float) -> float:
        """The weight's multiplier for a job of ``work`` that runs at most at ``best_throughput``."""
        if not self.exponent or not math.isfinite(work) or not best_throughput > 0:
            return 1.0
        seconds = max(work / best_throughput, 1.0)
        raw = min(self.cap, max(1.0 / self.cap, (self.reference_s / seconds) ** self.exponent))
        return float(2.0 ** (round(self.steps_per_octave * math.log2(raw)) / self.steps_per_octave))
