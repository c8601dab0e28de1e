"""What a DAG param may change in a pod: an allow-list, checked before anything is registered or launched.

A DAG run's ``conf`` is user input. It may add labels and annotations under the user's own keys, plain
environment variables of the workload's own, CPU/host-memory sizes and a priority class the platform
lists — nothing that changes *what* runs, with which privileges, from where it downloads, or how the
cluster treats the pod. The image, the command and its arguments, privileged mode or any security
context, host paths, volumes, host networking, the service account, the GPU request, the placement and
the launcher belong to the platform (the connection) and the planner.

One definition, two layers: ``OverridePolicy`` holds the rules; ``pod_overrides_schema`` turns them into
the DAGs' ``Param`` JSON schema (a bad ``conf`` is refused when the run is created) and
``check_pod_overrides`` applies them again in the operator (a DAG without the schema, or a templated
value, cannot slip through). The operator's policy adds what only the connection knows: the user's own
key domains (extra ``user_key_domains``) and the priority classes DAGs may pick (extra
``priority_classes``).

Keys of labels and annotations: a plain name (``team``) is the user's; a prefixed key (``example.com/x``)
only under one of the user's domains (or a sub-domain). Never, whatever the connection says: any
``kubernetes.io``, ``k8s.io`` or ``x-k8s.io`` domain or sub-domain (AppArmor, seccomp, the autoscaler's eviction
switch, ``app.kubernetes.io/managed-by`` …), ElastiCo's, NVIDIA's, HAMi's and Airflow's, nor the plain
keys KubernetesPodOperator sets to find its pods again (``dag_id``, ``run_id``, ``try_number`` …).

Environment names: only ``APP_*`` (the documented user prefix) and the workload settings in
``WORKLOAD_ENV``; every other name is refused, and ``DENIED_ENV`` says why for the families people try
(loader and interpreter hooks, proxies and CA bundles, model/download sources, GPU and NCCL controls,
the launch contract).

Every pattern ends with ``END`` (``$(?!\n)``), never a bare ``$``: Python's ``$`` (and so jsonschema's
``pattern``, which uses ``re.search``) also matches before a trailing newline, and ``"team\n"`` passed as a
key. Sizes are bounded (``MAX_ENTRIES`` per map, ``MAX_ENV_VALUE`` characters, no NUL byte), and a label
the connection sets (extra ``labels``) cannot be overwritten by a run's conf.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
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
    "launcher": "the launcher is the connection's (a run's conf cannot move a job out of its pod)",
}

# ---- label and annotation keys ------------------------------------------------------------------
# domains no DAG param may write under, sub-domains included, even if a connection lists them
RESERVED_DOMAINS = ("kubernetes.io", "k8s.io", "x-k8s.io", "elastico.io", "nvidia.com", "hami.io", "airflow.apache.org")
# plain keys set by ElastiCo or by KubernetesPodOperator (it finds its pods again by these on a retry)
RESERVED_KEYS = (
    "airflow_kpo_in_cluster",
    "airflow_version",
    "already_checked",
    "dag_id",
    "kubernetes_pod_operator",
    "map_index",
    "parent_dag_id",
    "run_id",
    "task_id",
    "try_number",
)
END = r"$(?!\n)"  # the end of the text, also for Python's re.search (bare "$" matches before a final newline)
NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
DOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
QUALIFIED = re.compile(rf"^({DOMAIN}/)?{NAME}{END}")
LABEL_VALUE = re.compile(rf"^([A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?)?{END}")
MAX_ENTRIES = 64  # labels, annotations or environment variables one run may add
MAX_ENV_VALUE = 32768  # characters of one environment value
MAX_ANNOTATION_VALUE = 4096

# ---- environment names --------------------------------------------------------------------------
USER_ENV_PREFIX = "APP_"  # the documented user prefix: the DAG's own settings for its own code
# settings the shipped workloads and their libraries read that change only logging or offline behaviour
WORKLOAD_ENV = (
    "HF_DATASETS_OFFLINE",
    "HF_HUB_DISABLE_PROGRESS_BARS",
    "HF_HUB_DISABLE_TELEMETRY",
    "HF_HUB_OFFLINE",
    "LOGLEVEL",
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "TOKENIZERS_PARALLELISM",
    "TORCH_CPP_LOG_LEVEL",
    "TORCH_SHOW_CPP_STACKTRACES",
    "TRANSFORMERS_OFFLINE",
    "TRANSFORMERS_VERBOSITY",
)
ENV_NAME = re.compile(rf"^[A-Z_][A-Z0-9_]{{0,127}}{END}")
# why a name is refused, by family (first match wins); everything not allowed is refused anyway
DENIED_ENV: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^ELASTICO_"), "the launch contract is ElastiCo's"),
    (re.compile(r"^(LD_|GCONV_PATH$|GLIBC_TUNABLES$|MALLOC_|BASH_ENV$|ENV$|SHELLOPTS$|IFS$|PS4$)"),
     "it changes how the loader, libc or the shell start the process"),
    (re.compile(r"^(PYTHON|PATH$|HOME$|TMPDIR$|VIRTUAL_ENV$|CONDA_|PIP_|UV_)"),
     "the interpreter and its environment are the launcher's"),
    (re.compile(r"^(HTTPS?_PROXY|ALL_PROXY|NO_PROXY|FTP_PROXY)$", re.IGNORECASE), "network routing is the platform's"),
    (re.compile(r"^(SSL_|REQUESTS_CA_BUNDLE$|CURL_CA_BUNDLE$|NODE_EXTRA_CA_CERTS$|GIT_SSL)"),
     "TLS trust is the platform's"),
    (re.compile(r"^(HF_|HUGGING_FACE_|TRANSFORMERS_|TORCH_HOME$|XDG_|MODELSCOPE_|VLLM_)"),
     "where models and code are downloaded from is the platform's"),
    (re.compile(r"^(CUDA_|NVIDIA_|NCCL_|GPU_|HAMI|NV_|TORCH_|PYTORCH_|OMP_|MKL_|OPENBLAS_|KMP_)"),
     "GPU, collective and thread controls come from the plan"),
    (re.compile(r"^(AIRFLOW|KUBERNETES_|MLFLOW_|AWS_|GOOGLE_|AZURE_)"), "the platform's credentials and endpoints"),
)

CPU = re.compile(rf"^([0-9]{{1,6}}(\.[0-9]{{1,3}})?|[0-9]{{1,9}}m){END}")
MEMORY = re.compile(rf"^[0-9]{{1,15}}(Ki|Mi|Gi|Ti|K|M|G|T)?{END}")
PRIORITY_CLASS = re.compile(rf"^[a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?{END}")
MAX_CPU = 64.0
MAX_MEMORY_GIB = 512.0


class PodOverrideError(ValueError):
    """A DAG param asked for a pod field outside the allow-list, or gave an invalid value."""


def _under(domain: str, parents: Iterable[str]) -> bool:
    return any(domain == p or domain.endswith("." + p) for p in parents)


@dataclass(frozen=True, slots=True)
class OverridePolicy:
    """The rules of the allow-list; the connection may add key domains and priority classes.

    :param user_domains: domains whose keys (and sub-domains' keys) DAGs may set; reserved ones never.
    :param priority_classes: priority class names DAGs may pick (none by default).
    """

    user_domains: tuple[str, ...] = ()
    priority_classes: tuple[str, ...] = ()
    platform_labels: tuple[str, ...] = ()  # label keys the connection sets: a run's conf cannot change them

    def __post_init__(self) -> None:
        for d in self.user_domains:
            if not isinstance(d, str) or not re.fullmatch(DOMAIN, d) or _under(d, RESERVED_DOMAINS):
                raise PodOverrideError(f"user key domain {d!r} is not a DNS domain outside {', '.join(RESERVED_DOMAINS)}")
        for name in self.priority_classes:
            if not isinstance(name, str) or not PRIORITY_CLASS.match(name) or name.startswith("system-"):
                raise PodOverrideError(f"priority class {name!r} is not a DNS name outside system-*")

    # ---- keys ---------------------------------------------------------------------------------------
    def key_problem(self, key: str) -> str | None:
        """Why a label/annotation key is refused, or None."""
        if len(key) > 316 or not QUALIFIED.match(key):
            return "is not a valid Kubernetes key"
        domain, slash, name = key.rpartition("/")
        if not slash:
            return f"is set by ElastiCo or Airflow ({', '.join(RESERVED_KEYS)})" if name in RESERVED_KEYS else None
        if _under(domain, RESERVED_DOMAINS):
            return f"is under a reserved domain ({', '.join(RESERVED_DOMAINS)}, sub-domains included)"
        if not _under(domain, self.user_domains):
            mine = ", ".join(self.user_domains) or "none configured"
            return f"is outside the user's key domains ({mine}; connection extra 'user_key_domains')"
        return None

    def key_pattern(self) -> str:
        """The JSON-schema pattern of allowed keys (the same rules as ``key_problem``)."""
        reserved = "|".join(re.escape(k) for k in RESERVED_KEYS)
        plain = rf"(?!({reserved}){END}){NAME}"
        if not self.user_domains:
            return rf"^{plain}{END}"
        mine = "|".join(re.escape(d) for d in self.user_domains)
        return rf"^({plain}|({DOMAIN}\.)?({mine})/{NAME}){END}"

    # ---- env ----------------------------------------------------------------------------------------
    @staticmethod
    def env_problem(name: str) -> str | None:
        """Why an environment name is refused, or None."""
        if not ENV_NAME.match(name):
            return "is not an environment variable name"
        if name in WORKLOAD_ENV:
            return None
        for pattern, why in DENIED_ENV:
            if pattern.match(name):
                return f"is refused: {why}"
        if name.startswith(USER_ENV_PREFIX) and len(name) > len(USER_ENV_PREFIX):
            return None
        return f"is not allowed (use the {USER_ENV_PREFIX}* prefix for the DAG's own settings)"

    @staticmethod
    def env_pattern() -> str:
        """The JSON-schema pattern of allowed environment names."""
        known = "|".join(WORKLOAD_ENV)
        return rf"^({known}|{USER_ENV_PREFIX}[A-Z0-9_]{{1,120}}){END}"

    # ---- priority class ----------------------------------------------------------------------------
    def priority_problem(self, name: str) -> str | None:
        if not PRIORITY_CLASS.match(name):
            return "is not a DNS subdomain name"
        if name.startswith("system-"):
            return "is one of Kubernetes' own system classes (never for a workload)"
        if name not in self.priority_classes:
            allowed = ", ".join(self.priority_classes) or "none configured"
            return f"is not one the platform allows ({allowed}; connection extra 'priority_classes')"
        return None


DEFAULT_POLICY = OverridePolicy()


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


def _entries(value: Any, field: str) -> Mapping[str, Any]:
    entries = _mapping(value, field)
    if len(entries) > MAX_ENTRIES:
        raise PodOverrideError(f"pod override {field} has {len(entries)} entries (at most {MAX_ENTRIES})")
    return entries


def _short(value: object) -> str:
    """A value as an error may quote it (a 10 MB value is named by its size, not printed)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}… ({len(str(value)):,} characters)"


def _keys(value: Any, field: str, policy: OverridePolicy, *, label: bool) -> tuple[tuple[str, str], ...]:
    out = []
    for key, val in _entries(value, field).items():
        why = policy.key_problem(key) if isinstance(key, str) else "is not a string"
        if why is None and label and key in policy.platform_labels:
            why = "is set by the platform (connection extra 'labels'); a run cannot change it"
        if why:
            raise PodOverrideError(f"pod override {field}: {_short(key)} {why}")
        if not isinstance(val, (str, int, float)) or isinstance(val, bool):
            raise PodOverrideError(f"pod override {field}.{key} must be a string")
        text = str(val)
        if len(text) > MAX_ANNOTATION_VALUE or "\x00" in text:
            raise PodOverrideError(f"pod override {field}.{key} is longer than {MAX_ANNOTATION_VALUE} characters or holds a NUL byte")
        if label and not LABEL_VALUE.match(text):
            raise PodOverrideError(f"pod override labels.{key}: {_short(text)} is not a valid label value (<= 63 characters)")
        out.append((key, text))
    return tuple(sorted(out))


def _quantity(convert: Any, text: str) -> float:
    try:
        return float(convert(text))
    except (ValueError, OverflowError):
        return -1.0  # not a quantity: refused by the caller with its one-line error


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


def _text(value: Any, field: str) -> str:
    """A scalar field as text ("" when absent); a boolean, list or object is refused."""
    if value is None or value == "":
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PodOverrideError(f"pod override {field} must be a string, got {type(value).__name__}")
    return str(value)


def check_pod_overrides(raw: Mapping[str, Any] | None, policy: OverridePolicy = DEFAULT_POLICY) -> PodOverrides:
    """Validate a DAG param's pod overrides. :raises PodOverrideError: naming the field and why."""
    if raw is None or raw == {}:
        return PodOverrides()
    data = _mapping(raw, "pod_overrides")
    for key in data:
        if key not in ALLOWED_FIELDS:
            why = REFUSED_FIELDS.get(str(key), "it is not on the allow-list")
            raise PodOverrideError(f"pod override {key!r} is not allowed: {why} (allowed: {', '.join(ALLOWED_FIELDS)})")
    env = []
    for name, value in _entries(data.get("env", {}), "env").items():
        why = policy.env_problem(name) if isinstance(name, str) else "is not a string"
        if why:
            raise PodOverrideError(f"pod override env: {_short(name)} {why}")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise PodOverrideError(f"pod override env.{name} must be a string")
        text = str(value)
        if len(text) > MAX_ENV_VALUE or "\x00" in text:
            raise PodOverrideError(f"pod override env.{name} is longer than {MAX_ENV_VALUE} characters or holds a NUL byte")
        env.append((name, text))
    cpu = _text(data.get("cpu"), "cpu")
    if cpu and (not CPU.match(cpu) or not 0 < _quantity(_cpu_cores, cpu) <= MAX_CPU):
        raise PodOverrideError(
            f"pod override cpu: {_short(cpu)} is not a CPU quantity in (0, {MAX_CPU:g}] (e.g. '2', '500m')"
        )
    memory = _text(data.get("memory"), "memory")
    if memory and (not MEMORY.match(memory) or not 0 < _quantity(_memory_gib, memory) <= MAX_MEMORY_GIB):
        raise PodOverrideError(
            f"pod override memory: {_short(memory)} is not a memory quantity in (0, {MAX_MEMORY_GIB:g}Gi] (e.g. '8Gi')"
        )
    priority = _text(data.get("priority_class_name"), "priority_class_name")
    if priority and (why := policy.priority_problem(priority)):
        raise PodOverrideError(f"pod override priority_class_name: {priority!r} {why}")
    return PodOverrides(
        labels=_keys(data.get("labels", {}), "labels", policy, label=True),
        annotations=_keys(data.get("annotations", {}), "annotations", policy, label=False),
        env=tuple(sorted(env)),
        cpu=cpu,
        memory=memory,
        priority_class_name=priority,
    )


def pod_overrides_schema(policy: OverridePolicy = DEFAULT_POLICY) -> dict[str, Any]:
    """The ``Param`` JSON schema of the same rules (a DAG may pass its platform's policy)."""
    keys = {"pattern": policy.key_pattern(), "maxLength": 316}
    priority: dict[str, Any] = {"type": "string", "enum": ["", *policy.priority_classes]}
    return {
        "type": "object",
        "description": "Allowed pod changes: labels, annotations (the user's own keys), env (APP_* and a few "
        "workload settings), cpu, memory, priority_class_name (from the platform's list). Image, command, "
        "privileges, host paths, volumes, the service account and the launcher are refused.",
        "additionalProperties": False,
        "properties": {
            "labels": {
                "type": "object",
                "maxProperties": MAX_ENTRIES,
                "propertyNames": keys,
                "additionalProperties": {"type": "string", "pattern": LABEL_VALUE.pattern, "maxLength": 63},
            },
            "annotations": {
                "type": "object",
                "maxProperties": MAX_ENTRIES,
                "propertyNames": keys,
                "additionalProperties": {"type": "string", "maxLength": MAX_ANNOTATION_VALUE},
            },
            "env": {
                "type": "object",
                "maxProperties": MAX_ENTRIES,
                "propertyNames": {"pattern": policy.env_pattern()},
                "additionalProperties": {"type": "string", "maxLength": MAX_ENV_VALUE},
            },
            "cpu": {"type": "string", "pattern": CPU.pattern},
            "memory": {"type": "string", "pattern": MEMORY.pattern},
            "priority_class_name": priority,
        },
    }


POD_OVERRIDES_SCHEMA: dict[str, Any] = pod_overrides_schema()
