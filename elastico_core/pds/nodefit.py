"""Whether a configuration could run on the cluster at all, node by node: CPU cores and host memory included.

A configuration that fits a GPU's memory and SMs can still never run: its gang needs more host memory (or
CPU cores) than any node of its GPU model has, even with nothing else running. The planner leaves such
configurations out of a job's options (``options``), so a job with no other configuration is reported
``no-feasible-config`` naming the node-level resource and the largest node's figure — and refused at
submit (``specs.admission``) — instead of waiting forever for room that will never come.

Units: CPU in cores, host memory in MiB, per GPU of the configuration (a gang needs that on every GPU).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from elastico_core.model.cluster import Cluster
from elastico_core.model.plan import Binding


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """One node's whole capacity (nothing placed): what an empty cluster offers a configuration."""

    name: str
    gpus: int
    cpu_cores: float
    host_mem_mib: float


def rooms(cluster: Cluster, model: str) -> tuple[NodeRoom, ...]:
    """The nodes with GPUs of ``model``, largest host memory first."""
    out = [NodeRoom(n.name, n.gpu_count, n.cpu_cores, n.host_mem_mib) for n in cluster.nodes
           if n.gpu.name == model and n.gpu_count > 0]
    return tuple(sorted(out, key=lambda r: (-r.host_mem_mib, -r.cpu_cores, r.name)))


def members(room: NodeRoom, cpu: float, host: float) -> int:
    """How many GPUs of a configuration one empty node can hold (its GPUs, cores and host memory)."""
    by_cpu = math.floor(room.cpu_cores / cpu + 1e-9) if cpu > 0 else room.gpus
    by_host = math.floor(room.host_mem_mib / host + 1e-9) if host > 0 else room.gpus
    return max(0, min(room.gpus, by_cpu, by_host))


def node_shortfall(nodes: Sequence[NodeRoom], cpu: float, host: float, gang: int, one_node: bool
                   ) -> tuple[Binding, float, float, str] | None:
    """None when an empty cluster's ``nodes`` hold the configuration; else the resource that rules it out,
    what it needs of it (on one node), the most any node has, and that node.

    A one-node gang (tensor parallelism) needs all ``gang`` members on one node; a data-parallel gang may
    spread over nodes, each node holding as many members as its cores and host memory allow.
    """
    if not nodes:
        return Binding.GPU_SLOT, float(gang), 0.0, ""
    if one_node or gang <= 1:
        if any(members(r, cpu, host) >= gang for r in nodes):
            return None
        need_host, need_cpu = host * gang, cpu * gang
    else:
        if sum(members(r, cpu, host) for r in nodes) >= gang:
            return None
        need_host, need_cpu = host, cpu
    most_host = max(nodes, key=lambda r: r.host_mem_mib)
    if need_host > most_host.host_mem_mib + 1e-6:
        return Binding.HOST_MEMORY, need_host, most_host.host_mem_mib, most_host.name
    most_cpu = max(nodes, key=lambda r: r.cpu_cores)
    if need_cpu > most_cpu.cpu_cores + 1e-9:
        return Binding.CPU, need_cpu, most_cpu.cpu_cores, most_cpu.name
    # enough cores and host memory for one member, not for the whole gang: the GPUs that can take a member bind
    if one_node:
        best = max(nodes, key=lambda r: members(r, cpu, host))
        return Binding.GPU_SLOT, float(gang), float(members(best, cpu, host)), best.name
    return Binding.GPU_SLOT, float(gang), float(sum(members(r, cpu, host) for r in nodes)), ""
