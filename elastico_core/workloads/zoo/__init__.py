"""The eight training workloads of Table 2 as real torch models, each at three scales."""

from __future__ import annotations

from collections.abc import Callable

from elastico_core.model.errors import SpecError
from elastico_core.workloads.scale import Scale
from elastico_core.workloads.zoo.base import Task


def _builders() -> dict[str, Callable[[Scale, int], Task]]:
    from elastico_core.workloads.zoo import bert, dcgan, lstm, ncf, pointnet, ppo, resnet, transformer

    return {
        "resnet50": resnet.build,
        "bert": bert.build,
        "dcgan": dcgan.build,
        "pointnet": pointnet.build,
        "transformer": transformer.build,
        "lstm": lstm.build,
        "ncf": ncf.build,
        "ppo": ppo.build,
    }


def module_of(workload: str) -> str:
    """The module that defines ``workload``'s model (what a trace of it depends on)."""
    builders = _builders()
    if workload not in builders:
        raise SpecError(f"no training model for {workload!r} (zoo: {', '.join(builders)})", field="workload")
    return builders[workload].__module__


def build_task(workload: str, scale: Scale, seed: int = 0) -> Task:
    """A fresh model (and its synthetic data source) for ``workload``; weights seeded by ``seed``."""
    builders = _builders()
    if workload not in builders:
        raise SpecError(f"no training model for {workload!r} (zoo: {', '.join(builders)})", field="workload")
    return builders[workload](scale, seed)
