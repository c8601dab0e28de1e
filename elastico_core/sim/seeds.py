"""One comparison over several seeds: the spread of each figure, and on how many seeds each claim holds.

A seed draws the trace, the workload mapping, the runtime estimates and the ground truth's noise, so a
single seed's ratios carry that draw's luck: on ``builtin:paper-mix`` at 64 GPUs, seed 0 puts ElastiCo
w/o PDS 2 % ahead of the full system and seeds 1-3 put it 0.4-0.9 % behind. A platform team judging a
scheduler on its own trace wants the spread, not one draw. Pure functions over per-seed metrics.

Ratios to a reference policy are taken per seed (both policies saw the same trace) and summarised by
their geometric mean, the mean that treats 2x and 0.5x symmetrically; raw metrics by their arithmetic
mean. A claim ("A's average JCT is below B's") is counted per seed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from elastico_core.model.errors import SpecError
from elastico_core.sim.metrics import JSON_KEYS, PolicyMetrics, normalised
from elastico_core.sim.policy import PolicyKind

RATIOS = ("avg_jct", "median_jct", "p95_jct", "throughput", "sm_util")
# the direction in which each headline figure is better (claims are "better than" per seed)
LOWER_IS_BETTER = frozenset({"avg_jct", "median_jct", "p95_jct"})
MAX_SEEDS = 64


def parse_seeds(raw: str) -> tuple[int, ...]:
    """``0,1,2`` or ``0-7`` (or a mix: ``0-3,9``): distinct seeds in the order given."""
    out: list[int] = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first, last = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise SpecError(f"expected seeds like 0,1,2 or 0-7, got {part!r}", field="seeds") from None
        if first < 0 or last < first:
            raise SpecError(f"a seed range needs 0 <= first <= last, got {part!r}", field="seeds")
        out.extend(s for s in range(first, last + 1) if s not in out)
    if not out:
        raise SpecError("no seed given", field="seeds")
    if len(out) > MAX_SEEDS:
        raise SpecError(f"at most {MAX_SEEDS} seeds per run, got {len(out)}", field="seeds")
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Spread:
    """A figure over seeds: its mean (geometric for ratios) and its smallest and largest value."""

    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float], geometric: bool = False) -> Spread:
        vals = [v for v in values if math.isfinite(v) and (v > 0 or not geometric)]
        if not vals:
            return cls(math.nan, math.nan, math.nan)
        mean = math.exp(sum(map(math.log, vals)) / len(vals)) if geometric else sum(vals) / len(vals)
        return cls(mean, min(vals), max(vals))

    def as_json(self) -> dict[str, float | None]:
        return {k: (round(v, 6) if math.isfinite(v) else None) for k, v in (("mean", self.mean), ("min", self.low), ("max", self.high))}


@dataclass(frozen=True, slots=True)
class Claim:
    """``policy`` is better than ``other`` on ``figure``, held on ``held`` of ``seeds`` seeds."""

    policy: str
    other: str
    figure: str
    held: int
    seeds: int

    @property
    def text(self) -> str:
        word = "lower" if self.figure in LOWER_IS_BETTER else "higher"
        return f"{self.policy} {self.figure} {word} than {self.other}"


@dataclass(frozen=True, slots=True)
class SeedSummary:
    """Per-seed metrics of the same policies, and what they say together."""

    seeds: tuple[int, ...]
    baseline: str
    per_seed: Mapping[int, Mapping[str, PolicyMetrics]]

    def __post_init__(self) -> None:
        if not self.seeds or set(self.seeds) != set(self.per_seed):
            raise ValueError("per_seed must hold exactly the seeds listed")
        names = [tuple(m) for m in self.per_seed.values()]
        if any(n != names[0] for n in names):
            raise ValueError("every seed must hold the same policies, in the same order")
        if self.baseline not in names[0]:
            raise ValueError(f"baseline {self.baseline!r} is not among the policies")

    @property
    def policies(self) -> tuple[str, ...]:
        return tuple(self.per_seed[self.seeds[0]])

    def metric(self, policy: str, key: str) -> Spread:
        """A raw metric (a field of PolicyMetrics) over seeds: arithmetic mean, min, max."""
        return Spread.of([float(getattr(self.per_seed[s][policy], key)) for s in self.seeds])

    def ratios(self, policy: str, figure: str, reference: str | None = None) -> list[float]:
        """``figure`` (one of RATIOS) of ``policy`` over the reference's (default: the baseline), seed by seed."""
        ref = reference or self.baseline
        return [normalised(self.per_seed[s][policy], self.per_seed[s][ref])[figure] for s in self.seeds]

    def ratio(self, policy: str, figure: str, reference: str | None = None) -> Spread:
        """The per-seed ratios' geometric mean, min and max."""
        return Spread.of(self.ratios(policy, figure, reference), geometric=True)

    def headline(self, policy: str) -> dict[str, float]:
        """The ``--json`` keys of one policy, each the mean over seeds."""
        return {k: round(self.metric(policy, k).mean, 6) for k in JSON_KEYS}

    def claim(self, policy: str, other: str, figure: str) -> Claim:
        lower = figure in LOWER_IS_BETTER
        held = sum(math.isfinite(r) and (r < 1.0 if lower else r > 1.0) for r in self.ratios(policy, figure, other))
        return Claim(policy, other, figure, held, len(self.seeds))

    def claims(self) -> tuple[Claim, ...]:
        """The orderings §5 states, among the policies that ran: Volcano-like, Lucid-like, ElastiCo in
        that order on JCT, throughput and SM utilisation; full ElastiCo ahead of each ablation on JCT."""
        present = set(self.policies)
        order = [k.value for k in (PolicyKind.VOLCANO, PolicyKind.LUCID, PolicyKind.ELASTICO) if k.value in present]
        pairs = list(itertools.pairwise(order))
        if len(order) == 3:
            pairs.append((order[0], order[2]))  # ElastiCo against Volcano-like directly
        out = [self.claim(better, worse, figure) for figure in ("avg_jct", "throughput", "sm_util") for worse, better in pairs]
        full = PolicyKind.ELASTICO.value
        if full in present:
            ablations = (PolicyKind.ELASTICO_NO_RST, PolicyKind.GREEDY, PolicyKind.ELASTICO_NO_IAC, PolicyKind.ELASTICO_NO_PDS)
            out += [self.claim(full, k.value, "avg_jct") for k in ablations if k.value in present]
        return tuple(out)

    def as_json(self) -> dict[str, object]:
        """The ``--json`` document of a several-seed run: the one-seed keys (means over seeds) plus the spread."""
        full = PolicyKind.ELASTICO.value
        doc: dict[str, object] = {
            "policies": {p: self.headline(p) for p in self.policies},
            "baseline": self.baseline,
            "seeds": list(self.seeds),
            "vs_baseline": {p: {f: self.ratio(p, f).as_json() for f in RATIOS} for p in self.policies},
            "per_seed": {str(s): {p: m.headline() for p, m in self.per_seed[s].items()} for s in self.seeds},
            "claims": [
                {"claim": c.text, "policy": c.policy, "other": c.other, "figure": c.figure, "held": c.held, "seeds": c.seeds}
                for c in self.claims()
            ],
        }
        if full in self.policies and full != self.baseline:
            doc["vs_elastico"] = {p: {f: self.ratio(p, f, full).as_json() for f in RATIOS} for p in self.policies if p != full}
        return doc
