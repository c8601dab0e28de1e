"""The cluster: nodes of identical GPUs, and the per-GPU sharing rules."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from elastico_core.model.errors import SpecError
from elastico_core.model.hardware import GpuModel, HardwareSignature
from elastico_core.model.queues import NO_QUEUES, QueueSet

NODE_NAME = re.compile(r"^[a-z0-9]([a-z0-9.\-]{0,251}[a-z0-9])?$")
M_SYS_MIB_DEFAULT = 512


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    gpu: GpuModel
    gpu_count: int
    cpu_cores: float
    host_mem_mib: float
    driver: str = "any"
    framework: str = "any"
    labels: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        where = f"node {self.name!r}"
        if not isinstance(self.name, str) or not NODE_NAME.match(self.name):
            raise SpecError("node names are lower-case DNS labels (Kubernetes node names)", where=where, field="name")
        if isinstance(self.gpu_count, bool) or not isinstance(self.gpu_count, int) or self.gpu_count < 0:
            raise SpecError(f"must be an integer >= 0, got {self.gpu_count!r}", where=where, field="gpus")
        for name in ("cpu_cores", "host_mem_mib"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise SpecError(f"must be a number > 0, got {value!r}", where=where, field=name)

    @property
    def signature(self) -> HardwareSignature:
        return HardwareSignature(self.gpu.name, self.gpu.memory_mib, self.driver, self.framework)


@dataclass(frozen=True, slots=True)
class Gpu:
    """One device, named ``<node>/<index>`` everywhere (plans, state, pods)."""

    id: str
    node: str
    index: int
    model: GpuModel


@dataclass(frozen=True, slots=True)
class Cluster:
    """Nodes plus the sharing rules: M_sys margin (§4.2) and at most ``max_jobs_per_gpu`` per GPU; ``queues``
    share it between teams (``model/queues.py``; none: no quotas)."""

    name: str
    nodes: tuple[Node, ...]
    m_sys_mib: int = M_SYS_MIB_DEFAULT
    max_jobs_per_gpu: int = 2
    queues: QueueSet = NO_QUEUES
    gpus: tuple[Gpu, ...] = field(init=False, repr=False, compare=False)
    _by_id: dict[str, Gpu] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"cluster {self.name!r}"
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise SpecError(f"duplicate node names {dup}", where=where, field="nodes")
        if isinstance(self.m_sys_mib, bool) or not isinstance(self.m_sys_mib, int) or self.m_sys_mib < 0:
            raise SpecError(f"must be an integer >= 0, got {self.m_sys_mib!r}", where=where, field="m_sys_mib")
        if not isinstance(self.max_jobs_per_gpu, int) or not 1 <= self.max_jobs_per_gpu <= 8:
            raise SpecError(f"must be an integer in 1..8, got {self.max_jobs_per_gpu!r}", where=where, field="max_jobs_per_gpu")
        gpus = tuple(
            Gpu(f"{node.name}/{i}", node.name, i, node.gpu) for node in self.nodes for i in range(node.gpu_count)
        )
        if not gpus:
            raise SpecError("the cluster has no GPUs", where=where, field="nodes")
        for node in self.nodes:
            if node.gpu.memory_mib <= self.m_sys_mib:
                raise SpecError(
                    f"m_sys_mib {self.m_sys_mib} leaves nothing of {node.gpu.name}'s {node.gpu.memory_mib} MiB",
                    where=where,
                    field="m_sys_mib",
                )
        object.__setattr__(self, "gpus", gpus)
        object.__setattr__(self, "_by_id", {g.id: g for g in gpus})
        if self.queues:
            counts: dict[str, int] = {}
            usable: dict[str, float] = {}
            for node in self.nodes:
                if node.gpu_count:
                    counts[node.gpu.name] = counts.get(node.gpu.name, 0) + node.gpu_count
                    usable[node.gpu.name] = float(node.gpu.memory_mib)
            self.queues.check_against(counts, usable, where)

    def gpu(self, gpu_id: str) -> Gpu | None:
        """The GPU named ``<node>/<index>``, or None."""
        return self._by_id.get(gpu_id)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def gpu_models(self) -> tuple[GpuModel, ...]:
        seen: dict[str, GpuModel] = {}
        for node in self.nodes:
            if node.gpu_count:
                seen.setdefault(node.gpu.name, node.gpu)
        return tuple(seen.values())

    def usable_mem_mib(self, model: GpuModel) -> float:
        """What jobs may use on one GPU of ``model``: device memory less M_sys."""
        return float(model.memory_mib - self.m_sys_mib)
