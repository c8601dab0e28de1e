"""``pod_resources``: the one place a plan becomes a GPU request, node placement and sharing settings.

DAG files never write ``nvidia.com/*`` resources, node selectors or tolerations; the operator calls this
helper with the admitted plan. Three mechanisms, chosen per deployment (connection extra ``sharing``):

``hami`` (default) — HAMi (Project-HAMi): its mutating webhook and ``hami-scheduler`` place the pod on a
GPU with room, and HAMi-core (an ``LD_PRELOAD``-ed CUDA interposer the device plugin injects) enforces
the per-container limits. The pod asks for ``nvidia.com/gpu: <dp>`` (vGPUs), ``nvidia.com/gpumem: <M_j MiB>``
(hard device-memory cap per GPU: the §4.2 budget) and, when co-located, ``nvidia.com/gpucores: <p>``
(the SM share the planner computed: the same number as ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``). A job
alone on its GPU asks for no ``gpucores`` so it neither is throttled nor marks the card exclusive (HAMi
treats ``gpucores: 100`` as exclusive use). ``nvidia.com/use-gpuuuid`` pins the planned device when the
platform knows the GPUs' UUIDs (connection extra ``gpu_uuids``); ``nvidia.com/vgpu-mode: hami-core``
selects the interposer mode. HAMi schedules only onto nodes labelled ``gpu=on``.

``device-plugin-mps`` — NVIDIA's device plugin with ``sharing.mps`` (``replicas: 2``): the plugin starts an
MPS control daemon per node and advertises each GPU as two ``nvidia.com/gpu`` replicas; a pod asks for
``nvidia.com/gpu: 1`` and lands on a node labelled ``nvidia.com/mps.capable=true``. The daemon gives each
client an equal share by default; the plan's ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` and
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (already in the env) narrow it per job. The plugin picks the GPU
within the node, so only the node is pinned.

``exclusive`` — whole GPUs (``nvidia.com/gpu: <dp>``), for clusters without either; co-location is then
impossible, so run the controller with ``max_jobs_per_gpu: 1``.

Every mechanism: the node is pinned with a required node affinity on ``metadata.name`` (the cluster
file's node names are the Kubernetes node names) plus ``kubernetes.io/hostname`` in the node selector,
and the usual ``nvidia.com/gpu`` NoSchedule taint is tolerated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from kubernetes.client import models as k8s

from elastico_airflow.settings import GpuSharing

MPS_THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
HAMI_SCHEDULER = "hami-scheduler"
HAMI_NODE_LABEL = ("gpu", "on")
MPS_NODE_LABEL = ("nvidia.com/mps.capable", "true")
GPU_PRESENT_LABEL = ("nvidia.com/gpu.present", "true")
HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_CPU = "2"
DEFAULT_MEMORY = "8Gi"


class PlacementError(ValueError):
    """A plan cannot be expressed as one pod (e.g. its GPUs span nodes)."""


@dataclass(frozen=True, slots=True)
class PodResources:
    """Resources, placement and sharing settings of one job's pod."""

    resources: k8s.V1ResourceRequirements
    node_selector: dict[str, str]
    affinity: k8s.V1Affinity
    tolerations: list[k8s.V1Toleration]
    annotations: dict[str, str] = field(default_factory=dict)
    scheduler_name: str | None = None


@dataclass(frozen=True, slots=True)
class PlanPlacement:
    """The parts of an admitted plan that decide a pod's resources (``PlanView`` has them all)."""

    gpus: tuple[str, ...]
    nodes: tuple[str, ...]
    memory_mib: float
    partners: tuple[str, ...]
    env: Mapping[str, str]


def _node_of(plan: PlanPlacement) -> str:
    nodes = sorted(set(plan.nodes) or {g.split("/", 1)[0] for g in plan.gpus})
    if len(nodes) != 1:
        raise PlacementError(f"the plan's GPUs {list(plan.gpus)} span nodes {nodes}: one pod runs on one node")
    return nodes[0]


def _threads(plan: PlanPlacement) -> int | None:
    raw = plan.env.get(MPS_THREADS_ENV)
    if raw is None:
        return None
    value = int(raw)
    if not 1 <= value <= 100:
        raise PlacementError(f"{MPS_THREADS_ENV}={raw} is outside 1..100")
    return value


def pod_resources(
    plan: PlanPlacement,
    sharing: GpuSharing,
    *,
    gpu_uuids: Mapping[str, str] | None = None,
    cpu: str = DEFAULT_CPU,
    memory: str = DEFAULT_MEMORY,
) -> PodResources:
    """Resources and placement for ``plan`` under ``sharing`` (module docstring).

    :param gpu_uuids: ``<node>/<index>`` -> NVIDIA UUID; HAMi pins the planned devices when all are known.
    :param cpu: host CPU request and limit of the workload container.
    :param memory: host memory request and limit of the workload container.
    """
    if not plan.gpus:
        raise PlacementError("the plan holds no GPU")
    node = _node_of(plan)
    count = len(plan.gpus)
    mem_mib = max(1, math.floor(plan.memory_mib))
    limits: dict[str, str] = {"cpu": cpu, "memory": memory}
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    annotations: dict[str, str] = {}
    scheduler: str | None = None
    selector = {HOSTNAME_LABEL: node}
    threads = _threads(plan) if plan.partners else None
    if sharing is GpuSharing.HAMI:
        limits["nvidia.com/gpu"] = str(count)
        limits["nvidia.com/gpumem"] = str(mem_mib)
        if threads is not None:
            limits["nvidia.com/gpucores"] = str(threads)
        annotations["nvidia.com/vgpu-mode"] = "hami-core"
        uuids = [(gpu_uuids or {}).get(g) for g in plan.gpus]
        if all(uuids):
            annotations["nvidia.com/use-gpuuuid"] = ",".join(u for u in uuids if u)
        scheduler = HAMI_SCHEDULER
        selector[HAMI_NODE_LABEL[0]] = HAMI_NODE_LABEL[1]
    elif sharing is GpuSharing.DEVICE_PLUGIN_MPS:
        if count != 1:
            raise PlacementError(
                f"device-plugin MPS shares one GPU between replicas; a {count}-GPU plan needs sharing 'hami' or 'exclusive'"
            )
        limits["nvidia.com/gpu"] = "1"
        selector[MPS_NODE_LABEL[0]] = MPS_NODE_LABEL[1]
    else:
        if plan.partners:
            raise PlacementError("the plan co-locates jobs but the cluster's GPU sharing is 'exclusive'")
        limits["nvidia.com/gpu"] = str(count)
        selector[GPU_PRESENT_LABEL[0]] = GPU_PRESENT_LABEL[1]
    # extended resources: the request must equal the limit (Kubernetes fills it in; be explicit)
    for key, value in limits.items():
        if key.startswith("nvidia.com/"):
            requests[key] = value
    affinity = k8s.V1Affinity(
        node_affinity=k8s.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(
                node_selector_terms=[
                    k8s.V1NodeSelectorTerm(
                        match_fields=[k8s.V1NodeSelectorRequirement(key="metadata.name", operator="In", values=[node])]
                    )
                ]
            )
        )
    )
    tolerations = [k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]
    return PodResources(
        resources=k8s.V1ResourceRequirements(requests=requests, limits=limits),
        node_selector=selector,
        affinity=affinity,
        tolerations=tolerations,
        annotations=annotations,
        scheduler_name=scheduler,
    )
