"""``PodPlan``: what one admitted plan sets on a pod; ``patch_pod``: setting it on the pod KPO built.

The operator extends ``KubernetesPodOperator.build_pod_request_obj`` the way KPO's own subclasses do
(``KubernetesJobOperator`` wraps the pod ``super()`` builds): KPO builds the pod from the DAG author's
arguments and pod templates — secrets, the XCom sidecar, the task-instance labels KPO finds its pods by,
the cluster policy (``pod_mutation_hook``) — and ``patch_pod`` writes the plan over that pod. A plan is
never stored in KPO's attributes, so a relaunch with another plan starts again from the author's pod.

What the plan does to each field of KPO's pod:

* **replaces** — the workload container's command, args, resources and security context; the XCom
  sidecar's security context; the pod's security context and node affinity (the author's pod affinity
  and anti-affinity stay); host network off; no service-account token;
* **adds, winning a clash** — env (the author's and KPO's variables stay unless the launch contract
  names them), labels, annotations, node selector, tolerations, volumes and mounts (an author's volume
  or mount of ElastiCo's name or path gives way);
* **fills in** — the image and image pull secrets where the author's pod has none; the service account,
  scheduler and priority class where the platform, the sharing mechanism or the DAG's allow-listed
  overrides name one.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubernetes.client import models as k8s

from elastico_airflow.allowlist import PodOverrides
from elastico_airflow.launchspec import LaunchSpec
from elastico_airflow.pod_resources import DEFAULT_CPU, DEFAULT_MEMORY, PlanPlacement, PodResources, pod_resources
from elastico_airflow.podspec import PodParts, pod_parts
from elastico_airflow.settings import ElasticoSettings

if TYPE_CHECKING:
    from elastico_core.state import PlanView

TOKEN_ANNOTATION = "elastico.io/token"
PLAN_ANNOTATION = "elastico.io/plan"
XCOM_SIDECAR = "airflow-xcom-sidecar"  # KPO's PodDefaults.SIDECAR_CONTAINER_NAME


@dataclass(frozen=True, slots=True)
class PodPlan:
    """Everything the plan of one launch sets on its pod (``patch_pod`` applies it; the module says how)."""

    token: str
    parts: PodParts  # command, args, env, run volume, security contexts, ElastiCo's and the platform's labels
    placement: PodResources  # resources, node selector, affinity, tolerations, scheduler, sharing annotations
    annotations: Mapping[str, str]  # the DAG's allow-listed ones, the placement's, the plan's token and summary
    image: str  # the connection's: for a pod whose author named none
    service_account: str  # the platform's; empty: the author's, if any
    image_pull_secrets: tuple[str, ...]  # the platform's: for a pod whose author named none
    priority_class_name: str  # the DAG's allow-listed class; empty: the author's, if any


def pod_plan(settings: ElasticoSettings, plan: PlanView, spec: LaunchSpec, overrides: PodOverrides) -> PodPlan:
    """The pod fields of ``plan`` launched as ``spec``; ``PlacementError`` if one pod cannot run it."""
    placement = pod_resources(
        PlanPlacement(plan.gpus, plan.nodes, plan.memory_mib, plan.partners, plan.launch.env_dict()),
        settings.sharing,
        gpu_uuids=dict(settings.gpu_uuids),
        cpu=overrides.cpu or DEFAULT_CPU,
        memory=overrides.memory or DEFAULT_MEMORY,
    )
    parts = pod_parts(
        spec,
        dp=len(plan.gpus),
        run_volume_claim=settings.run_volume_claim,
        state_url_secret=settings.state_url_secret,
        extra_labels={**dict(overrides.labels), **dict(settings.extra_labels)},  # the platform's labels win
    )
    summary = {
        "knobs": plan.knobs.as_dict(),
        "gpus": list(plan.gpus),
        "partners": list(plan.partners),
        "memory_mib": plan.memory_mib,
    }
    return PodPlan(
        token=plan.token,
        parts=parts,
        placement=placement,
        annotations={
            **dict(overrides.annotations),
            **placement.annotations,
            TOKEN_ANNOTATION: plan.token,
            PLAN_ANNOTATION: json.dumps(summary, sort_keys=True),
        },
        image=settings.image,
        service_account=settings.service_account,
        image_pull_secrets=settings.image_pull_secrets,
        priority_class_name=overrides.priority_class_name,
    )


def patch_pod(pod: k8s.V1Pod, plan: PodPlan, container: str) -> k8s.V1Pod:
    """``pod`` (as KPO built it) with ``plan`` written over it; ``container`` names the workload's container.

    The plan's objects are copied in, so the pod and the plan never share a mutable part.
    """
    plan = copy.deepcopy(plan)
    parts, placement = plan.parts, plan.placement
    meta, spec = pod.metadata, pod.spec
    base = next(c for c in spec.containers if c.name == container)
    base.image = base.image or plan.image
    base.command = list(parts.cmds)
    base.args = list(parts.arguments)
    base.env = _merged_env(parts.env_vars, base.env or [])
    base.resources = placement.resources
    base.security_context = parts.container_security_context
    mount_paths = {m.mount_path for m in parts.volume_mounts}
    mount_names = {m.name for m in parts.volume_mounts}
    base.volume_mounts = [
        *(m for m in base.volume_mounts or [] if m.mount_path not in mount_paths and m.name not in mount_names),
        *parts.volume_mounts,
    ]
    for sidecar in spec.containers:
        if sidecar.name == XCOM_SIDECAR:
            sidecar.security_context = copy.deepcopy(parts.container_security_context)
    names = {v.name for v in parts.volumes}
    spec.volumes = [*(v for v in spec.volumes or [] if v.name not in names), *parts.volumes]
    meta.labels = {**(meta.labels or {}), **parts.labels}
    meta.annotations = {**(meta.annotations or {}), **plan.annotations}
    spec.node_selector = {**(spec.node_selector or {}), **placement.node_selector}
    spec.affinity = spec.affinity or k8s.V1Affinity()
    spec.affinity.node_affinity = placement.affinity.node_affinity
    theirs = list(spec.tolerations or [])
    spec.tolerations = [*theirs, *(t for t in placement.tolerations if t not in theirs)]
    spec.security_context = parts.security_context
    spec.host_network = False
    spec.automount_service_account_token = False
    if placement.scheduler_name:
        spec.scheduler_name = placement.scheduler_name
    if plan.service_account:
        spec.service_account_name = plan.service_account
    if plan.image_pull_secrets and not spec.image_pull_secrets:
        spec.image_pull_secrets = [k8s.V1LocalObjectReference(name=n) for n in plan.image_pull_secrets]
    if plan.priority_class_name:
        spec.priority_class_name = plan.priority_class_name
    return pod


def _merged_env(contract: list[k8s.V1EnvVar], built: list[k8s.V1EnvVar]) -> list[k8s.V1EnvVar]:
    """The launch's variables, then every other variable of KPO's container (each name once, first wins)."""
    out: list[k8s.V1EnvVar] = []
    seen: set[str] = set()
    for var in (*contract, *built):
        if var.name not in seen:
            seen.add(var.name)
            out.append(var)
    return out
