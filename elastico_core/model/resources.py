"""Resource vectors: what one configuration of a job needs on each GPU it uses."""

from __future__ import annotations

import math
from dataclasses import dataclass

from elastico_core.model.errors import SpecError

RESOURCE_NAMES: tuple[str, ...] = ("sm", "gpu_mem_mib", "cpu_cores", "host_mem_mib")


@dataclass(frozen=True, slots=True)
class ResourceVector:
    """Per-GPU demand of one configuration (R_j(c) of §3.1).

    A data-parallel job of degree d needs this vector on each of its d GPUs.
    """

    sm: float  # share of one GPU's streaming multiprocessors, 0..1
    gpu_mem_mib: float  # device memory on that GPU
    cpu_cores: float  # host cores that serve this GPU's worker
    host_mem_mib: float  # host memory of that worker

    def __post_init__(self) -> None:
        for name in RESOURCE_NAMES:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise SpecError(f"must be a finite number, got {value!r}", field=name)
            if value < 0:
                raise SpecError(f"must be >= 0, got {value!r}", field=name)
        if self.sm > 1.0 + 1e-9:
            raise SpecError(f"an SM share is a fraction of one GPU (<= 1), got {self.sm!r}", field="sm")

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.sm, self.gpu_mem_mib, self.cpu_cores, self.host_mem_mib)

    def scaled(self, factor: float) -> ResourceVector:
        return ResourceVector(
            sm=min(1.0, self.sm * factor),
            gpu_mem_mib=self.gpu_mem_mib * factor,
            cpu_cores=self.cpu_cores * factor,
            host_mem_mib=self.host_mem_mib * factor,
        )
