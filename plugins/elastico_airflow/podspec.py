"""The pod of one launch: the ``LaunchSpec`` as a container, with ElastiCo's security and storage defaults.

Defaults every pod gets (a DAG param cannot change them, see ``allowlist``): it runs as a non-root user
(uid/gid 1000, ``runAsNonRoot``), without privilege escalation, with every capability dropped and the
runtime's default seccomp profile, without a service-account token, and with CPU and memory limits.

The container runs a small wrapper (``WRAPPER``): it starts the workload entrypoint with the launch
environment, forwards SIGTERM to it (the workload then checkpoints), and when it ends writes the latest
launch's progress events to ``/airflow/xcom/return.json`` — the XCom sidecar hands them to the operator,
which measures the throughput from them exactly as it does for a local process.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from kubernetes.client import models as k8s

from elastico_airflow.launchspec import POD_RUN_ROOT, LaunchSpec
from elastico_core.model.launch import ENV_STATE_URL

RUN_VOLUME = "elastico-run"
SHM_VOLUME = "dshm"
NON_ROOT_UID = 1000
MAX_EVENTS = 400
LABEL_SAFE = re.compile(r"[^A-Za-z0-9_.\-]+")

# Runs as the container's main process: python -c WRAPPER <module> <args...>
WRAPPER = """\
import json, os, signal, subprocess, sys
path = os.environ.get("ELASTICO_PROGRESS_FILE", "")
offset = os.path.getsize(path) if path and os.path.exists(path) else 0
child = subprocess.Popen([sys.executable, "-m", *sys.argv[1:]])
signal.signal(signal.SIGTERM, lambda s, f: child.send_signal(signal.SIGTERM))
code = child.wait()
events = []
try:
    with open(path, "rb") as fh:
        fh.seek(offset)
        for line in fh.read().decode("utf-8", "replace").splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict):
                events.append(ev)
except OSError:
    pass
steps = [e for e in events if e.get("event") == "step"]
keep = [e for e in events if e.get("event") != "step"] + steps[-MAX_EVENTS:]
keep.sort(key=lambda e: e.get("t", 0))
os.makedirs("/airflow/xcom", exist_ok=True)
with open("/airflow/xcom/return.json", "w", encoding="utf-8") as fh:
    json.dump({"exit_code": code, "events": keep}, fh)
sys.exit(0 if code == 0 else 1)
""".replace("MAX_EVENTS", str(MAX_EVENTS))


def label_value(text: str) -> str:
    """A valid label value (<= 63 characters, alphanumeric at both ends)."""
    cleaned = LABEL_SAFE.sub("-", text)[:63].strip("-_.")
    return cleaned or "x"


@dataclass(frozen=True, slots=True)
class PodParts:
    """What a plan adds to the pod KPO builds (``podplan`` patches it into ``build_pod_request_obj``'s V1Pod)."""

    cmds: list[str]
    arguments: list[str]
    env_vars: list[k8s.V1EnvVar]
    volumes: list[k8s.V1Volume]
    volume_mounts: list[k8s.V1VolumeMount]
    security_context: k8s.V1PodSecurityContext
    container_security_context: k8s.V1SecurityContext
    labels: dict[str, str]


def pod_parts(
    spec: LaunchSpec,
    *,
    dp: int,
    run_volume_claim: str = "",
    state_url_secret: str = "",
    extra_labels: Mapping[str, str] | None = None,
) -> PodParts:
    """Container command, env, volumes and security settings for ``spec``.

    :param run_volume_claim: a PersistentVolumeClaim for ``/elastico/run`` (checkpoints survive a relaunch
        on another pod, which a switch needs); empty: an emptyDir (the job restarts from scratch on relaunch).
    :param state_url_secret: ``<secret>/<key>`` exposing the state URL as ``ELASTICO_STATE_URL``; the URL
        itself never appears in a pod spec.
    """
    env = [k8s.V1EnvVar(name=k, value=v) for k, v in spec.env if k != ENV_STATE_URL]
    if state_url_secret:
        name, _, key = state_url_secret.partition("/")
        env.append(
            k8s.V1EnvVar(
                name=ENV_STATE_URL,
                value_from=k8s.V1EnvVarSource(secret_key_ref=k8s.V1SecretKeySelector(name=name, key=key or "url")),
            )
        )
    if run_volume_claim:
        run = k8s.V1Volume(
            name=RUN_VOLUME,
            persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(claim_name=run_volume_claim),
        )
    else:
        run = k8s.V1Volume(name=RUN_VOLUME, empty_dir=k8s.V1EmptyDirVolumeSource())
    volumes = [run]
    mounts = [k8s.V1VolumeMount(name=RUN_VOLUME, mount_path=str(POD_RUN_ROOT))]
    if dp > 1:  # NCCL between data-parallel ranks needs more than the default 64 MiB of /dev/shm
        volumes.append(k8s.V1Volume(name=SHM_VOLUME, empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory")))
        mounts.append(k8s.V1VolumeMount(name=SHM_VOLUME, mount_path="/dev/shm"))
    labels = {  # ElastiCo's own keys last: no extra label overwrites them
        **{k: label_value(v) for k, v in (extra_labels or {}).items()},
        "app.kubernetes.io/managed-by": "elastico",
        "elastico.io/job": label_value(spec.job_id),
        "elastico.io/launch": label_value(spec.token.rsplit(":", 1)[-1]),
    }
    return PodParts(
        cmds=["python", "-c", WRAPPER],
        arguments=[spec.module, *spec.args],
        env_vars=env,
        volumes=volumes,
        volume_mounts=mounts,
        security_context=k8s.V1PodSecurityContext(
            run_as_non_root=True,
            run_as_user=NON_ROOT_UID,
            run_as_group=NON_ROOT_UID,
            fs_group=NON_ROOT_UID,
            seccomp_profile=k8s.V1SeccompProfile(type="RuntimeDefault"),
        ),
        container_security_context=k8s.V1SecurityContext(
            allow_privilege_escalation=False,
            privileged=False,
            run_as_non_root=True,
            capabilities=k8s.V1Capabilities(drop=["ALL"]),
        ),
        labels=labels,
    )


CONTROL_SNIPPET = (
    "import json, os, sys; p = os.environ['ELASTICO_CONTROL_FILE']; "
    "open(p + '.tmp', 'w').write(json.dumps({'action': sys.argv[1], 'reason': 'elastico'})); os.replace(p + '.tmp', p)"
)


def control_command(action: str) -> list[str]:
    """What the operator execs in the workload container to deliver a switch (``checkpoint``) or ``stop``."""
    return ["python", "-c", CONTROL_SNIPPET, action]
