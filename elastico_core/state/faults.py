"""Fault handling that changes what the planner may choose: OOM kills narrow a job's knob space.

Rule (never retry forever in the same configuration): after an OOM kill at configuration ``c`` that
really needed ``M`` MiB per GPU (its corrected profile row, at least the planned budget), the job's space becomes a *box below c*: one knob ``k`` is restricted
to the values whose one-step move from ``c`` is predicted to need strictly less than ``M``, and every other
knob to the values predicted to need at most ``M`` (its value in ``c`` always stays allowed). Under the
estimators' per-knob monotone memory model every configuration in the box needs less memory than ``c``,
and ``c`` itself is never in it. Among the knobs that admit such a cut, the one keeping the most
configurations wins (ties: the smallest memory cut, to keep throughput). The box only shrinks, so a job
is killed at most ``|space| - 1`` times; the controller also gives up after ``max_oom_kills``.

The memory predictions come from the profile store *after* the kill was fed back into it (the failed
configuration's row raised to what was observed, see ``corrected_profile``), so a workload whose memory
the estimator underestimates is cut more deeply.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace

from elastico_core.model.hardware import GpuModel, HardwareSignature
from elastico_core.model.job import JobSpec
from elastico_core.model.knobs import Knobs, KnobValue, value_key
from elastico_core.model.profile import Profile, Source

EPS_MIB = 1e-6
UNKNOWN_OOM_FACTOR = 1.25  # when the launcher cannot say how much it reached: budget x 1.25 (at least +1 GiB)


def lower_memory_limits(
    spec: JobSpec, failed: Knobs, budget_mib: float, mem_of: Callable[[Knobs], float | None]
) -> dict[str, list[KnobValue]] | None:
    """Knob limits (knob -> allowed values) of the box below ``failed``; None when no knob can go lower.

    ``mem_of`` predicts the per-GPU memory of a configuration (None: it cannot run on that GPU at all).
    """
    def mem(knobs: Knobs) -> float:
        value = mem_of(knobs)
        return math.inf if value is None else value

    best: tuple[tuple[int, float], dict[str, list[KnobValue]]] | None = None
    for cut in spec.knob_space:
        if cut.name not in failed:
            continue
        lower = [(v, mem(failed.with_(**{cut.name: v}))) for v in cut.values]
        lower = [(v, m) for v, m in lower if m < budget_mib - EPS_MIB]
        if not lower:
            continue
        limits: dict[str, list[KnobValue]] = {cut.name: [v for v, _ in lower]}
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


def merge_limits(old: Mapping[str, list[KnobValue]] | None, new: Mapping[str, list[KnobValue]]) -> dict[str, list[KnobValue]]:
    """Limits only ever shrink: the intersection of the old and the new allowed values per knob."""
    out = {k: list(v) for k, v in (old or {}).items()}
    for name, values in new.items():
        if name in out:
            keep = {value_key(v) for v in out[name]}
            out[name] = [v for v in values if value_key(v) in keep]
        else:
            out[name] = list(values)
    return out


def corrected_profile(
    base: Profile, signature: HardwareSignature, model: GpuModel, budget_mib: float, observed_mib: float | None, at: str
) -> Profile:
    """The failed configuration's profile with its memory raised to what the kill showed.

    Stored as ``measured`` because the memory figure is an observation (it outranks estimates and
    calibrates the nearest-neighbour interpolation of the workload's other configurations);
    the throughput stays the prior profile's.
    """
    if observed_mib is not None and observed_mib > budget_mib:
        memory = observed_mib
    else:
        memory = max(budget_mib * UNKNOWN_OOM_FACTOR, budget_mib + 1024.0)
    memory = min(float(model.memory_mib), max(memory, base.resources.gpu_mem_mib))
    return replace(
        base,
        signature=signature,
        resources=replace(base.resources, gpu_mem_mib=memory),
        source=Source.MEASURED,
        measured_at=at,
    )


def measured_profile(base: Profile, signature: HardwareSignature, throughput: float, peak_mib: float | None, at: str) -> Profile:
    """An isolated run's measured throughput (and peak memory, if reported) as a profile row."""
    resources = base.resources if peak_mib is None else replace(base.resources, gpu_mem_mib=peak_mib)
    return replace(base, signature=signature, resources=resources, throughput=throughput, source=Source.MEASURED, measured_at=at)
