"""Fault handling that changes what the planner may choose: OOM kills narrow a job's knob space.

The rule itself (the box below the crashed configuration, the floor fallback, when to give up) is
ElastiCo's, shared with the simulator: ``pds.rules``. Here: the profile rows a kill or a measurement
writes back.

The memory predictions come from the profile store *after* the kill was fed back into it (the failed
configuration's row raised to what was observed, see ``corrected_profile``), so a workload whose memory
the estimator underestimates is cut more deeply.
"""

from __future__ import annotations

from dataclasses import replace

from elastico_core.model.hardware import GpuModel, HardwareSignature
from elastico_core.model.profile import Profile, Source
from elastico_core.pds.oom import lower_memory_limits, merge_limits

__all__ = ["UNKNOWN_OOM_FACTOR", "corrected_profile", "lower_memory_limits", "measured_profile", "merge_limits"]

UNKNOWN_OOM_FACTOR = 1.25  # when the launcher cannot say how much it reached: budget x 1.25 (at least +1 GiB)


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
    # never above the device (the store refuses such a row): "all of it" already means it fits nowhere smaller
    memory = min(float(model.memory_mib), float(signature.gpu_mem_mib), max(memory, base.resources.gpu_mem_mib))
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
