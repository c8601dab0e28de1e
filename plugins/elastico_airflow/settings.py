"""Where the planner state lives and how jobs are launched: one frozen value resolved from ``elastico_default``.

The platform team configures the cluster side once, in the Airflow connection; DAG authors never see it.
Resolution order for the state URL (the one setting that locates the state everywhere):

1. the connection's extra ``state_url`` (a full SQLAlchemy URL, e.g. ``postgresql+psycopg2://u:p@db/elastico``);
2. the connection's host when it holds a URL (``sqlite:///...``, ``postgresql://...``);
3. a PostgreSQL connection (``conn_type`` ``postgres``): host, port, schema (database), login, password;
4. ``$ELASTICO_STATE_URL``;
5. the default SQLite file ``.elastico/state.db`` (relative to the worker's working directory).

Why pure functions over plain values: the hook, the trigger (in the triggerer), the status page (in the
api-server) and the tests all resolve the same way, and nothing here needs a live Airflow.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import quote

from elastico_airflow.allowlist import OverridePolicy, PodOverrideError
from elastico_core.model.errors import SpecError
from elastico_core.model.queues import QUEUE_NAME
from elastico_core.state.url import has_secret, normalize_state_url
from elastico_core.state.url import redact_url as _redact

ENV_STATE_URL = "ELASTICO_STATE_URL"
ENV_LAUNCHER = "ELASTICO_LAUNCHER"
ENV_WORKDIR = "ELASTICO_WORKDIR"
DEFAULT_STATE_URL = "sqlite:///.elastico/state.db"
DEFAULT_WORKDIR = Path(".elastico") / "runs"
DEFAULT_NAMESPACE = "elastico"
DEFAULT_IMAGE = "elastico-workload:latest"  # built from docker/workload.Dockerfile
# workload settings a platform may pin per deployment (model folder, size preset, threads); nothing else
WORKLOAD_ENV_KEYS = ("ELASTICO_MODEL", "ELASTICO_SCALE", "ELASTICO_TORCH_THREADS")


class Launcher(StrEnum):
    """How an admitted job is started: a pod (production) or a local process (the embedded default)."""

    KUBERNETES = "kubernetes"
    LOCAL = "local"


class GpuSharing(StrEnum):
    """The Kubernetes mechanism by which two pods share one GPU (see ``pod_resources``)."""

    HAMI = "hami"  # HAMi scheduler + device plugin: nvidia.com/gpumem, nvidia.com/gpucores
    DEVICE_PLUGIN_MPS = "device-plugin-mps"  # NVIDIA device plugin sharing.mps (replicas=2)
    EXCLUSIVE = "exclusive"  # whole GPUs, no sharing (a cluster without either)


class SettingsError(ValueError):
    """The connection or environment does not describe a usable ElastiCo setup."""


@dataclass(frozen=True, slots=True)
class ElasticoSettings:
    """Everything the operator needs from the platform. ``state_url`` may hold a password: never log it,
    use ``state_url_redacted``.
    """

    state_url: str
    launcher: Launcher = Launcher.LOCAL
    namespace: str = DEFAULT_NAMESPACE
    image: str = DEFAULT_IMAGE
    sharing: GpuSharing = GpuSharing.HAMI
    workdir: Path = DEFAULT_WORKDIR
    workload_env: tuple[tuple[str, str], ...] = ()
    gpu_uuids: tuple[tuple[str, str], ...] = ()  # "<node>/<index>" -> "GPU-..." (HAMi use-gpuuuid)
    run_volume_claim: str = ""  # PVC for checkpoints/progress in pods; empty: emptyDir (no resume across pods)
    state_url_secret: str = ""  # "<secret>/<key>" holding the state URL for pods (never the URL itself)
    service_account: str = ""  # the platform's choice, never a DAG param
    image_pull_secrets: tuple[str, ...] = ()
    mlflow_tracking_uri: str = ""
    # where people open MLflow (the status page links each job to its run there); default: an http(s)
    # tracking URI itself, else none
    mlflow_ui_url: str = ""
    # a CPU run's throughput is not a GPU profile: fed back only where a demo keeps its own profile store
    report_cpu_throughput: bool = False
    source: str = "default"  # where state_url came from (for messages)
    extra_labels: tuple[tuple[str, str], ...] = field(default=())
    user_key_domains: tuple[str, ...] = ()  # label/annotation domains DAG params may write under
    priority_classes: tuple[str, ...] = ()  # priority classes DAG params may pick
    default_queue: str = ""  # the ElastiCo queue of a task that names none (extra ``queue``; '' = ``default``)

    @property
    def override_policy(self) -> OverridePolicy:
        """The allow-list of DAG params' pod overrides, with what this connection adds to it."""
        return OverridePolicy(self.user_key_domains, self.priority_classes, tuple(k for k, _ in self.extra_labels))

    @property
    def state_url_redacted(self) -> str:
        return redact_url(self.state_url)

    def uuid_of(self, gpu_id: str) -> str | None:
        return dict(self.gpu_uuids).get(gpu_id)


def redact_url(url: str) -> str:
    """``scheme://user:***@host/db?sslpassword=***``: what may appear in logs, XComs and the status page."""
    return _redact(url)


def has_password(url: str) -> bool:
    """Whether the URL holds a secret anywhere (userinfo or a query parameter such as ``password=``)."""
    return has_secret(url)


def _extra_dict(extra: str | Mapping[str, Any] | None) -> dict[str, Any]:
    if not extra:
        return {}
    if isinstance(extra, Mapping):
        return dict(extra)
    try:
        out = json.loads(extra)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"connection extra is not JSON ({exc.msg})") from None
    if not isinstance(out, dict):
        raise SettingsError("connection extra must be a JSON object")
    return out


def _pairs(raw: Any, what: str) -> tuple[tuple[str, str], ...]:
    if raw in (None, ""):
        return ()
    if not isinstance(raw, Mapping):
        raise SettingsError(f"connection extra {what!r} must be an object")
    return tuple(sorted((str(k), str(v)) for k, v in raw.items()))


def _flag(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    return str(raw or "").strip().lower() in ("1", "true", "yes", "on")


def _enum(kind: type[StrEnum], raw: Any, what: str, default: StrEnum) -> Any:
    if raw in (None, ""):
        return default
    try:
        return kind(str(raw).strip().lower())
    except ValueError:
        allowed = ", ".join(m.value for m in kind)  # type: ignore[attr-defined]
        raise SettingsError(f"{what} {raw!r} is not one of: {allowed}") from None


@dataclass(frozen=True, slots=True)
class ConnectionFields:
    """The parts of an Airflow connection that matter here (so resolution is testable without Airflow)."""

    conn_type: str = ""
    host: str = ""
    schema: str = ""
    login: str = ""
    password: str = ""
    port: int | None = None
    extra: str | Mapping[str, Any] | None = None


def state_url_of(conn: ConnectionFields | None, env: Mapping[str, str]) -> tuple[str, str]:
    """(state URL, where it came from) by the precedence of the module docstring."""
    if conn is not None:
        extra = _extra_dict(conn.extra)
        if extra.get("state_url"):
            return str(extra["state_url"]), "connection extra state_url"
        host = (conn.host or "").strip()
        if "://" in host:
            return host, "connection host"
        if conn.conn_type in ("postgres", "postgresql") and host:
            creds = quote(conn.login or "", safe="")
            if conn.password:
                creds += ":" + quote(conn.password, safe="")
            port = f":{conn.port}" if conn.port else ""
            at = "@" if creds else ""
            return f"postgresql+psycopg2://{creds}{at}{host}{port}/{conn.schema or 'elastico'}", "connection (postgres)"
    if env.get(ENV_STATE_URL, "").strip():
        return env[ENV_STATE_URL].strip(), f"${ENV_STATE_URL}"
    return DEFAULT_STATE_URL, "default"


def _ui_url(extra: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """The MLflow UI's address: extra ``mlflow_ui_url``, ``$ELASTICO_MLFLOW_UI_URL``, or an http tracking URI
    without credentials."""
    explicit = str(extra.get("mlflow_ui_url") or env.get("ELASTICO_MLFLOW_UI_URL") or "").strip()
    if explicit:
        return explicit.rstrip("/")
    tracking = str(extra.get("mlflow_tracking_uri") or env.get("MLFLOW_TRACKING_URI") or "")
    if tracking.startswith(("http://", "https://")) and "@" not in tracking:
        return tracking.rstrip("/")
    return ""


def resolve_settings(conn: ConnectionFields | None, env: Mapping[str, str] | None = None) -> ElasticoSettings:
    """The settings a connection (or its absence) and the environment describe."""
    env = os.environ if env is None else env
    url, source = state_url_of(conn, env)
    try:  # refuse a URL the parser rejects here, once, in one line that never shows it (it may hold a password)
        normalize_state_url(url)
    except SpecError as exc:
        raise SettingsError(f"{source}: {exc}") from None
    extra = _extra_dict(conn.extra) if conn is not None else {}
    workload_env = _pairs(extra.get("workload_env"), "workload_env")
    bad = [k for k, _ in workload_env if k not in WORKLOAD_ENV_KEYS]
    if bad:
        raise SettingsError(f"workload_env may only set {', '.join(WORKLOAD_ENV_KEYS)}; got {bad}")
    workdir = Path(str(extra.get("workdir") or env.get(ENV_WORKDIR) or DEFAULT_WORKDIR))
    pull = _names(extra.get("image_pull_secrets"))
    domains, classes = _names(extra.get("user_key_domains")), _names(extra.get("priority_classes"))
    try:
        OverridePolicy(domains, classes)
    except PodOverrideError as exc:
        raise SettingsError(str(exc)) from None
    queue = str(extra.get("queue") or "").strip()
    if queue and not QUEUE_NAME.match(queue):
        raise SettingsError(f"queue {queue!r} is not a DNS label (lower case letters, digits and '-', at most 63)")
    return ElasticoSettings(
        state_url=url,
        launcher=_enum(Launcher, extra.get("launcher") or env.get(ENV_LAUNCHER), "launcher", Launcher.LOCAL),
        namespace=str(extra.get("namespace") or DEFAULT_NAMESPACE),
        image=str(extra.get("image") or DEFAULT_IMAGE),
        sharing=_enum(GpuSharing, extra.get("sharing"), "sharing", GpuSharing.HAMI),
        workdir=workdir.absolute(),
        workload_env=workload_env,
        gpu_uuids=_pairs(extra.get("gpu_uuids"), "gpu_uuids"),
        run_volume_claim=str(extra.get("run_volume_claim") or ""),
        state_url_secret=str(extra.get("state_url_secret") or ""),
        service_account=str(extra.get("service_account") or ""),
        image_pull_secrets=pull,
        mlflow_tracking_uri=str(extra.get("mlflow_tracking_uri") or env.get("MLFLOW_TRACKING_URI") or ""),
        mlflow_ui_url=_ui_url(extra, env),
        report_cpu_throughput=_flag(extra.get("report_cpu_throughput")),
        source=source,
        extra_labels=_pairs(extra.get("labels"), "labels"),
        user_key_domains=domains,
        priority_classes=classes,
        default_queue=queue,
    )


def _names(raw: Any) -> tuple[str, ...]:
    """A list of names from a JSON list or a comma-separated string."""
    if not raw:
        return ()
    items = raw.split(",") if isinstance(raw, str) else raw
    return tuple(str(p).strip() for p in items if str(p).strip())
