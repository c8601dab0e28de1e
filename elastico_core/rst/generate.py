"""Fill the profile store with estimated rows for every configuration of every known workload."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from elastico_core.model.hardware import GpuModel
from elastico_core.model.knobs import Knobs, cartesian
from elastico_core.model.profile import Profile
from elastico_core.model.workload import Workload
from elastico_core.rst.estimators import estimate


def estimated_profiles(
    workloads: Iterable[Workload],
    gpus: Iterable[GpuModel],
    estimator: Callable[[Workload, Knobs, GpuModel], Profile | None] = estimate,
) -> Iterator[Profile]:
    """Every feasible configuration's estimate (``estimator``: the parametric one unless given, e.g. a
    store's ``ProfileStore.estimate``, which is traced where traces exist)."""
    gpu_list = list(gpus)
    for workload in workloads:
        for knobs in cartesian(workload.knobs):
            for gpu in gpu_list:
                profile = estimator(workload, knobs, gpu)
                if profile is not None:
                    yield profile
