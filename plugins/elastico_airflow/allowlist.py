"""What a DAG param may change in a pod: an allow-list, checked before anything is registered or launched.

A DAG run's ``conf`` is user input. It may add labels and annotations, plain environment variables and
CPU/host-memory sizes, and pick a priority class — nothing that changes *what* runs or with which
privileges. The image, the command and its arguments, privileged mode or any security context, host
paths, volumes, host networking, the service account, the GPU request and the placement belong to the
platform (the connection) and the planner. Two layers enforce it: the DAGs' ``Param`` JSON schemas reject
a bad ``conf`` when the run is created, and ``check_pod_overrides`` rejects it again in the operator (a
DAG without those schemas, or a templated value, cannot slip through).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ALLOWED_FIELDS = ("annotations", "cpu", "env", "labels", "memory", "priority_class_name")
# the fields people try most, each with why it is refused
REFUSED_FIELDS = {
    "image": "the image is the platform's (connection extra 'image')",
    "image_pull_policy": "the image is the platform's",
    "cmds": "the command is ElastiCo's workload entrypoint",
    "command": "the command is ElastiCo's workload entrypoint",
    "arguments": "arguments come from the admitted plan",
    "args": "arguments come from the admitted plan",
    "privileged": "pods never run privileged",
    "security_context": "pods run as non-root with a fixed security context",
    "container_security_context": "pods run as non-root with a fixed security context",
    "capabilities": "pods drop all capabilities",
    "run_as_user": "pods run as non-root with a fixed security context",
    "host_path": "host paths are never mounted",
    "volumes": "volumes are the platform's",
    "volume_mounts": "volumes are the platform's",
    "host_network": "pods never use the host network",
    "hostnetwork": "pods never use the host network",
    "host_pid": "pods never share the host PID namespace",
    "service_account": "the service account is the platform's",
    "service_account_name": "the service account is the platform's",
    "node_selector": "placement comes from the planner",
    "affinity": "placement comes from the planner",
    "tolerations": "placement comes from the planner",
    "scheduler_name": "the GPU-sharing scheduler is the platform's",
    "resources": "the GPU request comes from the planner (use 'cpu' / 'memory' for host resources)",
    "container_resources": "the GPU request comes from the planner (use 'cpu' / 'memory' for host resources)",
    "namespace": "the namespace is the platform's",
}
# environment variables a DAG param may not set: the launch contract, CUDA/MPS controls, loader paths
RESERVED_ENV = re.compile(
    r"^(ELASTICO_|CUDA_|NVIDIA_|PYTORCH_|VLLM_|LD_|PYTHON|AIRFLOW|KUBERNETES_|MLFLOW_)|^(PATH|HOME)$"
)
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
# qualified names: optional DNS-subdomain prefix, then a name of <= 63 characters
QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
RESERVED_PREFIXES = ("elastico.io/", "nvidia.com/", "hami.io/", "kubernetes.io/", "k8s.io/")
CPU = re.compile(r"^([0-9]+(\.[0-9]{1,3})?|[0-9]+m)$")
MEMORY = re.compile(r"^[0-9]+(Ki|Mi|Gi|Ti|K|M|G|T)?$")
PRIORITY_CLASS = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
MAX_CPU = 64.0
MAX_MEMORY_GIB = 512.0


class PodOverrideError(ValueError):
    """A DAG param asked for a pod field outside the allow-list, or gave an invalid value."""


@dataclass(frozen=True, slots=True)
class PodOverrides:
    """The validated overrides (empty by default)."""

    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cpu: str = ""
    memory: str = ""
    priority_class_name: str = ""


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PodOverrideError(f"pod override {field!r} must be an object, got {type(value).__name__}")
    return value


def _keys(value: Any, field: str, *, label: bool) -> tuple[tuple[str, str], ...]:
    out = []
    for key, val in _mapping(value, field).items():
        if not isinstance(key, str) or not QUALIFIED.match(key) or len(key) > 316:
            raise PodOverrideError(f"pod override {field}: {key!r} is not a valid Kubernetes key")
        if key.startswith(RESERVED_PREFIXES):
            raise PodOverrideError(
                f"pod override {field}: {key!r} uses a reserved prefix ({', '.join(RESERVED_PREFIXES)})"
            )
        if not isinstance(val, (str, int, float)) or isinstance(val, bool):
            raise PodOverrideError(f"pod override {field}.{key} must be a string")
        text = str(val)
        if label and not LABEL_VALUE.match(text):
            raise PodOverrideError(f"pod override labels.{key}: {text!r} is not a valid label value (<= 63 characters)")
        if len(text) > 4096:
            raise PodOverrideError(f"pod override {field}.{key} is longer than 4096 characters")
        out.append((key, text))
    return tuple(sorted(out))


def _cpu_cores(text: str) -> float:
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _memory_gib(text: str) -> float:
    units = {
        "Ki": 2**-20,
        "Mi": 2**-10,
        "Gi": 1,
        "Ti": 1024,
        "K": 1e3 / 2**30,
        "M": 1e6 / 2**30,
        "G": 1e9 / 2**30,
        "T": 1e12 / 2**30,
    }
    for suffix, scale in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    return float(text) / 2**30


def check_pod_overrides(raw: Mapping[str, Any] | None) -> PodOverrides:
    """Validate a DAG param's pod overrides. :raises PodOverrideError: naming the field and why."""
    if raw is None or raw == {}:
        return PodOverrides()
    data = _mapping(raw, "pod_overrides")
    for key in data:
        if key not in ALLOWED_FIELDS:
            why = REFUSED_FIELDS.get(str(key), "it is not on the allow-list")
            raise PodOverrideError(f"pod override {key!r} is not allowed: {why} (allowed: {', '.join(ALLOWED_FIELDS)})")
    env = []
    for name, value in _mapping(data.get("env", {}), "env").items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise PodOverrideError(f"pod override env: {name!r} is not an environment variable name")
        if RESERVED_ENV.match(name):
            raise PodOverrideError(
                f"pod override env: {name!r} is reserved (the launch contract and CUDA controls are ElastiCo's)"
            )
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise PodOverrideError(f"pod override env.{name} must be a string")
        env.append((name, str(value)))
    cpu = str(data.get("cpu", "") or "")
    if cpu and (not CPU.match(cpu) or not 0 < _cpu_cores(cpu) <= MAX_CPU):
        raise PodOverrideError(
            f"pod override cpu: {cpu!r} is not a CPU quantity in (0, {MAX_CPU:g}] (e.g. '2', '500m')"
        )
    memory = str(data.get("memory", "") or "")
    if memory and (not MEMORY.match(memory) or not 0 < _memory_gib(memory) <= MAX_MEMORY_GIB):
        raise PodOverrideError(
            f"pod override memory: {memory!r} is not a memory quantity in (0, {MAX_MEMORY_GIB:g}Gi] (e.g. '8Gi')"
        )
    priority = str(data.get("priority_class_name", "") or "")
    if priority and not PRIORITY_CLASS.match(priority):
        raise PodOverrideError(f"pod override priority_class_name: {priority!r} is not a DNS subdomain name")
    return PodOverrides(
        labels=_keys(data.get("labels", {}), "labels", label=True),
        annotations=_keys(data.get("annotations", {}), "annotations", label=False),
        env=tuple(sorted(env)),
        cpu=cpu,
        memory=memory,
        priority_class_name=priority,
    )


POD_OVERRIDES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Allowed pod changes: labels, annotations, env, cpu, memory, priority_class_name. "
    "Image, command, privileges, host paths, volumes and the service account are refused.",
    "additionalProperties": False,
    "properties": {
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 4096}},
        "env": {
            "type": "object",
            "propertyNames": {"pattern": ENV_NAME.pattern},
            "additionalProperties": {"type": "string"},
        },
        "cpu": {"type": "string", "pattern": CPU.pattern},
        "memory": {"type": "string", "pattern": MEMORY.pattern},
        "priority_class_name": {"type": "string", "pattern": PRIORITY_CLASS.pattern},
    },
}
