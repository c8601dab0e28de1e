"""Which pairs to co-locate: candidates per workload and a stratified sample of their pairs (§3.3.2).

The paper profiles 20-30 % of all candidate pairs, stratified by co-location type (training-training,
training-inference, inference-inference) so that every type is represented.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from elastico_core.model.errors import SpecError
from elastico_core.model.knobs import Knobs, cartesian
from elastico_core.model.workload import JobKind, Workload

STRATA = ("T+T", "T+I", "I+I")


@dataclass(frozen=True, slots=True)
class Candidate:
    workload: Workload
    knobs: Knobs

    @property
    def label(self) -> str:
        return f"{self.workload.name}:{self.knobs.to_json()}"


def stratum(a: Candidate, b: Candidate) -> str:
    infer = (a.workload.kind is JobKind.INFER) + (b.workload.kind is JobKind.INFER)
    return STRATA[infer]


def candidates(workloads: Sequence[Workload], per_workload: int = 1, seed: int = 0) -> list[Candidate]:
    """Each workload's default configuration, plus ``per_workload - 1`` others drawn from its grid."""
    if per_workload < 1:
        raise SpecError(f"must be >= 1, got {per_workload}", field="configs-per-workload")
    rng = random.Random(seed)
    out = []
    for w in workloads:
        chosen = [w.defaults]
        others = [k for k in cartesian(w.knobs) if k != w.defaults and k.get("dp", 1) == 1]
        chosen += rng.sample(others, min(per_workload - 1, len(others)))
        out += [Candidate(w, k) for k in chosen]
    return out


def sample_pairs(
    cands: Sequence[Candidate], fraction: float = 0.25, seed: int = 0, max_pairs: int = 0
) -> list[tuple[Candidate, Candidate]]:
    """``fraction`` of each stratum's pairs (at least one per non-empty stratum), seeded, in a stable order.

    Pairs are unordered and include a configuration paired with a second copy of itself.
    """
    if not 0.0 < fraction <= 1.0:
        raise SpecError(f"must lie in (0, 1], got {fraction}", field="fraction")
    rng = random.Random(seed)
    by_stratum: dict[str, list[tuple[Candidate, Candidate]]] = {s: [] for s in STRATA}
    for a, b in itertools.combinations_with_replacement(cands, 2):
        if a.workload.kind is JobKind.INFER and b.workload.kind is JobKind.TRAIN:
            a, b = b, a  # training side first: a stable orientation for T+I
        by_stratum[stratum(a, b)].append((a, b))
    chosen: dict[str, list[tuple[Candidate, Candidate]]] = {}
    for s, pairs in by_stratum.items():
        if pairs:
            k = max(1, round(fraction * len(pairs)))
            chosen[s] = rng.sample(pairs, k)
    if max_pairs and sum(len(v) for v in chosen.values()) > max_pairs:
        quota = _apportion({s: len(v) for s, v in chosen.items()}, max_pairs)
        chosen = {s: v[: quota[s]] for s, v in chosen.items()}
    return [p for s in STRATA for p in chosen.get(s, [])]


def _apportion(sizes: dict[str, int], cap: int) -> dict[str, int]:
    """Split ``cap`` over strata in proportion to their sizes (largest remainder), one each first if it fits."""
    quota = {s: 0 for s in sizes}
    if cap >= len(sizes):
        quota = {s: 1 for s in sizes}
    left = cap - sum(quota.values())
    total = sum(sizes.values())
    shares = {s: left * n / total for s, n in sizes.items()}
    for s in sizes:
        quota[s] = min(sizes[s], quota[s] + math.floor(shares[s]))
    for s in sorted(sizes, key=lambda k: shares[k] - math.floor(shares[k]), reverse=True):
        if sum(quota.values()) >= cap:
            break
        if quota[s] < sizes[s]:
            quota[s] += 1
    return quota
