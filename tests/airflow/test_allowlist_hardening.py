"""Every override the adversarial probe got through (valid against the Kubernetes 1.37 schema), refused now:
by ``check_pod_overrides`` in the operator and by the DAGs' ``Param`` schema, from the one definition."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

# (override, what the operator's message says); each was accepted before
PROBED: list[tuple[dict[str, Any], str]] = [
    ({"annotations": {"container.apparmor.security.beta.kubernetes.io/base": "unconfined"}}, "reserved domain"),
    ({"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}, "reserved domain"),
    ({"labels": {"scheduling.k8s.io/group-name": "g"}}, "reserved domain"),
    ({"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}}, "reserved domain"),
    ({"labels": {"app.kubernetes.io/managed-by": "me"}}, "reserved domain"),
    ({"labels": {"kueue.x-k8s.io/queue-name": "vip"}}, "reserved domain"),
    ({"labels": {"try_number": "1"}}, "set by ElastiCo or Airflow"),
    ({"labels": {"dag_id": "other"}}, "set by ElastiCo or Airflow"),
    ({"labels": {"HAMI.IO/x": "1"}}, "not a valid Kubernetes key"),
    ({"annotations": {"Elastico.io/token": "t"}}, "not a valid Kubernetes key"),
    ({"annotations": {"hami.io/gpu-scheduler-policy": "spread"}}, "reserved domain"),
    ({"priority_class_name": "system-node-critical"}, "system classes"),
    ({"priority_class_name": "vip"}, "not one the platform allows"),
    *[
        ({"env": {name: "x"}}, "refused")
        for name in (
            "NCCL_NET_PLUGIN", "GCONV_PATH", "GLIBC_TUNABLES", "HTTPS_PROXY", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
            "HF_ENDPOINT", "TORCH_HOME", "BASH_ENV", "GPU_CORE_UTILIZATION_POLICY", "PATH", "PYTHONSTARTUP",
            "TMPDIR", "VIRTUAL_ENV", "OMP_NUM_THREADS",
        )
    ],
    ({"env": {"MY_SETTING": "x"}}, "not allowed (use the APP_"),
]


@pytest.mark.parametrize(("raw", "message"), PROBED, ids=[str(r)[:60] for r, _ in PROBED])
def test_check_pod_overrides_refuses_what_the_probe_got_through(raw: dict[str, Any], message: str) -> None:
    from elastico_airflow.allowlist import PodOverrideError, check_pod_overrides

    with pytest.raises(PodOverrideError, match=message.replace("(", r"\(")):
        check_pod_overrides(raw)


@pytest.mark.parametrize(("raw", "message"), PROBED, ids=[str(r)[:60] for r, _ in PROBED])
def test_the_param_schema_refuses_it_too(raw: dict[str, Any], message: str) -> None:
    from elastico_airflow.params import POD_OVERRIDES_SCHEMA

    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(raw, POD_OVERRIDES_SCHEMA)


def test_what_stays_allowed_passes_both_layers() -> None:
    from elastico_airflow.allowlist import OverridePolicy, check_pod_overrides, pod_overrides_schema

    raw = {"labels": {"team": "nlp"}, "annotations": {"note": "x"}, "env": {"APP_MODE": "fast", "HF_HUB_OFFLINE": "1"},
           "cpu": "2", "memory": "4Gi"}
    jsonschema.validate(raw, pod_overrides_schema())
    assert check_pod_overrides(raw).env == (("APP_MODE", "fast"), ("HF_HUB_OFFLINE", "1"))
    # the connection adds the user's own domains (sub-domains included) and the priority classes DAGs may pick
    policy = OverridePolicy(user_domains=("example.com",), priority_classes=("batch-low",))
    mine = {"labels": {"ml.example.com/team": "nlp"}, "annotations": {"example.com/owner": "a"},
            "priority_class_name": "batch-low"}
    jsonschema.validate(mine, pod_overrides_schema(policy))
    assert check_pod_overrides(mine, policy).priority_class_name == "batch-low"
    for bad in ({"labels": {"example.org/x": "1"}}, {"labels": {"notexample.com/x": "1"}},
                {"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, pod_overrides_schema(policy))
    with pytest.raises(ValueError, match=r"reserved|outside"):
        OverridePolicy(user_domains=("kubernetes.io",))


def test_elastico_labels_are_never_overwritten() -> None:
    from elastico_airflow.launchspec import RunPaths, launch_spec
    from elastico_airflow.podspec import pod_parts

    paths = RunPaths("/run/ck", "/run/progress.jsonl", "/run/control.json")
    spec = launch_spec("j1", "train", "j1:1", {}, (), paths)
    parts = pod_parts(spec, dp=1, extra_labels={"app.kubernetes.io/managed-by": "me", "elastico.io/job": "x"})
    assert parts.labels["app.kubernetes.io/managed-by"] == "elastico" and parts.labels["elastico.io/job"] == "j1"


def test_local_launcher_keeps_its_own_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even a spec that carries TMPDIR/VIRTUAL_ENV/OMP_NUM_THREADS (the allow-list refuses them) cannot override them."""
    from elastico_airflow import local
    from elastico_airflow.launchspec import LaunchSpec, RunPaths
    from tests.airflow.conftest import wait_until

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    paths = RunPaths(str(tmp_path / "ck"), str(tmp_path / "p.jsonl"), str(tmp_path / "c.json"))
    out = tmp_path / "env.txt"
    (tmp_path / "envdump.py").write_text(
        "import os\nopen(os.environ['APP_OUT'], 'w').write(os.environ['TMPDIR'] + ' ' + os.environ['OMP_NUM_THREADS'])\n"
    )
    env = (("APP_OUT", str(out)), ("OMP_NUM_THREADS", "64"), ("TMPDIR", "/evil"))
    ref = local.start(LaunchSpec("j", "j:1", "envdump", env, (), paths), tmp_path / "run", cwd=tmp_path,
                      python=sys.executable)
    wait_until(lambda: local.outcome(ref).exit_code is not None, 60, "the process to end")
    assert local.outcome(ref).exit_code == 0
    assert out.read_text() == f"{tmp_path} 1"


def test_a_run_cannot_move_its_job_out_of_the_pod(elastico_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a Kubernetes connection, launcher 'local' (a run's conf templated into the operator) is refused."""
    from airflow.sdk.exceptions import AirflowFailException

    from elastico_airflow.operators import ElasticoJobOperator
    from elastico_airflow.settings import ConnectionFields, SettingsError, resolve_settings
    from tests.airflow.conftest import FakeTI, fake_context

    monkeypatch.setenv("AIRFLOW_CONN_ELASTICO_DEFAULT", elastico_env.connection(launcher="kubernetes"))
    op = ElasticoJobOperator(task_id="t", workload="lstm", floor=1.0, launcher="local")
    with pytest.raises(AirflowFailException, match="launcher 'local' refused"):
        op.execute(fake_context(FakeTI(task_id="t")))
    # the connection's lists feed the operator's policy; a reserved domain there is a settings error
    got = resolve_settings(ConnectionFields(extra={"user_key_domains": "example.com", "priority_classes": ["batch"]}), {})
    assert got.override_policy.priority_classes == ("batch",) and got.override_policy.user_domains == ("example.com",)
    with pytest.raises(SettingsError, match=r"kueue\.x-k8s\.io"):
        resolve_settings(ConnectionFields(extra={"user_key_domains": ["kueue.x-k8s.io", "k8s.io"]}), {})
