"""The watch side of a pod launch (``launch.Launch``), through the provider's own trigger and async hook.

The pod is read the way the provider's deferrable ``KubernetesPodOperator`` reads it from the triggerer:
a ``KubernetesPodTrigger`` built from the operator's connection settings supplies the
``AsyncKubernetesHook`` (``get_pod``, ``delete_pod``) and ``define_pod_container_state`` (the pod's phase,
then the base container's state). On top of it: a switch request is exec'd into the workload container
(``podspec.control_command``, over ``kubernetes_asyncio``'s websocket client; where exec is not allowed
the supervise loop deletes the pod with a grace period instead: SIGTERM checkpoints), a pod that never
starts within ``startup_timeout`` or fails early (a bad image) counts as ended, and a pod that is gone
(deleted, evicted and collected) counts as ended too — the task then reads how from what is left.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from airflow.providers.cncf.kubernetes.triggers.pod import ContainerState, KubernetesPodTrigger
from airflow.providers.cncf.kubernetes.utils.pod_manager import detect_pod_terminate_early_issues

from elastico_airflow.launch import LaunchRef, Probe
from elastico_airflow.podspec import control_command

log = logging.getLogger(__name__)
KPO_FIELDS = (
    "kubernetes_conn_id",
    "cluster_context",
    "config_dict",
    "in_cluster",
    "startup_timeout",
    "schedule_timeout",
    "base_container_name",
    "termination_grace_period",
)


def kpo_where(op: Any, pod: Any) -> dict[str, Any]:
    """What the watch side needs of a KPO and its pod, as JSON (the connection's extras are not copied: the
    triggerer resolves the connection itself, so no credential lands in the trigger row)."""
    return {
        "name": pod.metadata.name,
        "namespace": pod.metadata.namespace,
        "kubernetes_conn_id": op.kubernetes_conn_id,
        "cluster_context": op.cluster_context,
        "config_dict": getattr(op, "_config_dict", None),
        "in_cluster": op.in_cluster,
        "startup_timeout": int(op.startup_timeout_seconds),
        "schedule_timeout": int(op.schedule_timeout_seconds or op.startup_timeout_seconds),
        "base_container_name": op.base_container_name,
        "termination_grace_period": op.termination_grace_period,
    }


def container_oom(pod: Any, container: str) -> bool:
    """Whether the kernel OOM-killed ``container`` (a V1Pod of either client library)."""
    try:
        for status in pod.status.container_statuses or []:
            term = status.state.terminated if status.state else None
            if status.name == container and term is not None and (term.reason or "") == "OOMKilled":
                return True
    except AttributeError:
        return False
    return False


def _status_of(exc: BaseException) -> int | None:
    for err in (exc, exc.__cause__, exc.__context__):
        status = getattr(err, "status", None)
        if isinstance(status, int):
            return status
    return None


class PodLaunch:
    """One pod of one plan token, watched from the triggerer."""

    def __init__(self, ref: LaunchRef, pod_trigger: KubernetesPodTrigger | None = None) -> None:
        self.ref = ref
        self.token = ref.token
        where: Mapping[str, Any] = ref.where
        self.name, self.namespace = str(where["name"]), str(where["namespace"])
        self.container = str(where.get("base_container_name") or "base")
        timeout = where.get("startup_timeout")
        self.startup_timeout = float(120 if timeout is None else timeout)
        self.kpo = pod_trigger or KubernetesPodTrigger(
            pod_name=self.name,
            pod_namespace=self.namespace,
            trigger_start_time=None,  # type: ignore[arg-type]  # not used outside KPO's own run()
            base_container_name=self.container,
            kubernetes_conn_id=where.get("kubernetes_conn_id"),
            cluster_context=where.get("cluster_context"),
            config_dict=where.get("config_dict"),
            in_cluster=where.get("in_cluster"),
            startup_timeout=int(self.startup_timeout),
            schedule_timeout=int(where.get("schedule_timeout") or self.startup_timeout),
            termination_grace_period=where.get("termination_grace_period"),
        )
        self._since = time.monotonic()
        self._started = False

    async def poll(self) -> Probe:
        try:
            pod = await self.kpo._get_pod()
        except Exception as exc:
            if _status_of(exc) == 404:
                return Probe(True, detail=f"pod {self.namespace}/{self.name} is gone")
            log.warning("cannot read pod %s/%s (%s); retrying", self.namespace, self.name, type(exc).__name__)
            return Probe.running("unreadable")
        state = self.kpo.define_pod_container_state(pod)
        if state in (ContainerState.TERMINATED, ContainerState.FAILED):
            return Probe(True, oom_killed=container_oom(pod, self.container), detail=str(pod.status.phase or ""))
        early = detect_pod_terminate_early_issues(pod)
        if early:
            return Probe(True, detail=early)
        if state is ContainerState.RUNNING:
            self._started = True
        elif not self._started and time.monotonic() - self._since > self.startup_timeout:
            return Probe(True, detail=f"pod did not start within {self.startup_timeout:.0f} s")
        return Probe.running(str(pod.status.phase or "") if pod.status else "")

    async def request(self, action: str) -> bool:
        """Exec the control command in the workload container (needs ``pods/exec`` create)."""
        from kubernetes_asyncio.client import CoreV1Api
        from kubernetes_asyncio.stream import WsApiClient

        try:
            async with self.kpo.hook.get_conn():  # loads the connection's configuration into the hook
                pass
            async with WsApiClient(configuration=self.kpo.hook.client_configuration) as ws:
                await CoreV1Api(api_client=ws).connect_get_namespaced_pod_exec(
                    self.name,
                    self.namespace,
                    container=self.container,
                    command=control_command(action),  # type: ignore[arg-type]  # a list: one argv item each
                    stderr=True,
                    stdin=False,
                    stdout=True,
                    tty=False,
                )
        except Exception as exc:
            log.warning("exec into %s/%s failed (%s)", self.namespace, self.name, type(exc).__name__)
            return False
        return True

    async def terminate(self, *, force: bool) -> None:
        grace = 0 if force else int(self.ref.where.get("termination_grace_period") or 30)
        await self.kpo.hook.delete_pod(name=self.name, namespace=self.namespace, grace_period_seconds=grace)

    async def events(self) -> list[dict[str, Any]]:
        return []  # a pod's progress comes back through its XCom when it ends
