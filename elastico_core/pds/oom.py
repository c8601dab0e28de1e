"""The box below a configuration that ran out of memory: the knob limits ElastiCo's OOM rule narrows a job to.

Kept apart from ``rules`` (and free of numpy and the planner) because the state facade, which Airflow
triggers import, applies stored limits to job specs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from elastico_core.model.job import JobSpec
from elastico_core.model.knobs import Knobs, KnobValue, value_key

EPS_MIB = 1e-6
Limits = dict[str, list[KnobValue]]  # knob -> allowed values


def lower_memory_limits(spec: JobSpec, failed: Knobs, budget_mib: float, mem_of: Callable[[Knobs], float | None]) -> Limits | None:
    """Knob limits of the box below ``failed`` (see the module's notes); None when no knob can go lower.

    ``mem_of`` predicts the per-GPU memory of a configuration (None: it cannot run on that GPU at all).
    """

    def mem(knobs: Knobs) -> float:
        value = mem_of(knobs)
        return math.inf if value is None else value

    best: tuple[tuple[int, float], Limits] | None = None
    for cut in spec.knob_space:
        if cut.name not in failed:
            continue
        lower = [(v, mem(failed.with_(**{cut.name: v}))) for v in cut.values]
        lower = [(v, m) for v, m in lower if m < budget_mib - EPS_MIB]
        if not lower:
            continue
        limits: Limits = {cut.name: [v for v, _ in lower]}
        for other in spec.knob_space:
            if other.name == cut.name:
                continue
            here = failed.get(other.name)
            limits[other.name] = [
                v for v in other.values
                if value_key(v) == value_key(here) or mem(failed.with_(**{other.name: v})) <= budget_mib + EPS_MIB  # type: ignore[arg-type]
            ]
        size = math.prod(len(v) for v in limits.values())
        key = (size, max(m for _, m in lower))
        if best is None or key > best[0]:
            best = (key, limits)
    if best is None:
        return None
    full = {s.name: len(s.values) for s in spec.knob_space}
    return {k: v for k, v in best[1].items() if len(v) < full[k]}


def merge_limits(old: Mapping[str, list[KnobValue]] | None, new: Mapping[str, list[KnobValue]]) -> Limits:
    """Limits only ever shrink: the intersection of the old and the new allowed values per knob."""
    out = {k: list(v) for k, v in (old or {}).items()}
    for name, values in new.items():
        if name in out:
            keep = {value_key(v) for v in out[name]}
            out[name] = [v for v in values if value_key(v) in keep]
        else:
            out[name] = list(values)
    return out


def apply_limits(spec: JobSpec, limits: Mapping[str, Sequence[KnobValue]] | None) -> JobSpec:
    """The spec with knobs narrowed to ``limits`` (what OOM kills left of its space)."""
    if not limits:
        return spec
    space = tuple(s.restricted(tuple(limits[s.name])) if s.name in limits else s for s in spec.knob_space)
    return replace(spec, knob_space=space)
