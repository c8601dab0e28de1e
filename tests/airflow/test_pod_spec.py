"""Every pod the operator builds is a valid Kubernetes 1.37 Pod carrying the admitted plan (no cluster needed).

A co-located pair (a training and an inference job the controller put on one GPU) is planned for real,
then built for each GPU-sharing mechanism and checked against the schema (``kubernetes-validate``,
strict) and semantically: quantities, names, env, args, resources, placement, MPS settings, security.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from kubernetes.client import ApiClient
from kubernetes.utils import parse_quantity

from tests.airflow.conftest import FakeTI, fake_context, run_epochs

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
ONE_GPU = """\
cluster:
  name: pair
  m_sys_mib: 512
  max_jobs_per_gpu: 2
  nodes:
    - {name: gpu-node-0, count: 1, gpu: a100-80gb, gpus: 1, cpu_cores: 16, host_mem_gib: 64}
"""
PAIR_GPU_MIB = 81920  # bert and qwen-1.7b need 40 GiB together, beyond a 40 GB card less the rules' memory margin
SECRET = "pw-Sup3rSecret-0042"


def semantic_errors(body: dict[str, Any]) -> list[str]:
    """What kubernetes-validate does not check: quantities, names, label syntax, env names and values."""
    errors = []
    meta = body["metadata"]
    if len(meta["name"]) > 253 or not DNS_SUBDOMAIN.match(meta["name"]):
        errors.append(f"pod name {meta['name']!r}")
    if not DNS_LABEL.match(meta.get("namespace", "")):
        errors.append(f"namespace {meta.get('namespace')!r}")
    for key, value in (meta.get("labels") or {}).items():
        if not QUALIFIED.match(key) or len(value) > 63 or not LABEL_VALUE.match(value):
            errors.append(f"label {key}={value!r}")
    for key in meta.get("annotations") or {}:
        if not QUALIFIED.match(key):
            errors.append(f"annotation {key!r}")
    spec = body["spec"]
    for c in spec["containers"]:
        if not DNS_LABEL.match(c["name"]) or not c.get("image"):
            errors.append(f"container {c.get('name')!r} / image {c.get('image')!r}")
        for kind in ("requests", "limits"):
            for res, q in ((c.get("resources") or {}).get(kind) or {}).items():
                try:
                    parse_quantity(q)
                except ValueError:
                    errors.append(f"{c['name']} {kind}.{res}={q!r}")
        for e in c.get("env") or []:
            if not ENV_NAME.match(e["name"]) or ("value" in e and not isinstance(e["value"], str)):
                errors.append(f"env {e!r}")
    for term in (
        spec.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    ):
        for req in term.get("matchExpressions", []) + term.get("matchFields", []):
            if req["operator"] not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
                errors.append(f"affinity operator {req['operator']!r}")
    for t in spec.get("tolerations") or []:
        if t.get("operator") not in ("Exists", "Equal") or t.get("effect") not in (
            "NoSchedule",
            "PreferNoSchedule",
            "NoExecute",
            None,
        ):
            errors.append(f"toleration {t!r}")
    return errors


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A training and an inference job admitted together on one GPU by a real planning epoch."""
    from elastico_core.state import ExternalIdentity, JobService

    tmp = tmp_path_factory.mktemp("pair")
    cluster = tmp / "cluster.yaml"
    cluster.write_text(ONE_GPU)
    url = f"sqlite:///{tmp / 'state.db'}"
    svc = JobService.open(url)
    specs = {
        "train": {"workload": "bert", "floor": 50, "knobs": {"micro_batch": [32, 64], "checkpointing": [True]}},
        "label": {"workload": "qwen-1.7b", "floor": 100, "knobs": {"max_model_len": [4096], "max_num_seqs": [2, 4]}},
    }
    ids = {}
    for task, job in specs.items():
        ids[task] = svc.register(job, ExternalIdentity.airflow("pods", "run-1", task), try_number=1).job.id
    run_epochs(url, cluster, Path(__file__).resolve().parents[2] / "profiles", n=1)
    jobs = {task: svc.get(job_id) for task, job_id in ids.items()}
    svc.close()
    for job in jobs.values():
        assert job.status.value == "admitted" and job.plan is not None, job.reason
    assert jobs["train"].plan.gpus == jobs["label"].plan.gpus, "the planner should co-locate the pair on the one GPU"
    return jobs


def build(
    job: Any,
    kind: str,
    sharing: str,
    *,
    entry_args: tuple[str, ...] = (),
    extra: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from elastico_airflow.allowlist import check_pod_overrides
    from elastico_airflow.operators import ElasticoJobOperator
    from elastico_airflow.settings import ConnectionFields, resolve_settings

    settings = resolve_settings(
        ConnectionFields(
            conn_type="elastico",
            password=SECRET,
            extra={
                "state_url": f"postgresql+psycopg2://elastico:{SECRET}@db/elastico",
                "launcher": "kubernetes",
                "namespace": "ml-batch",
                "image": "registry.example/elastico:1.0",
                "sharing": sharing,
                "run_volume_claim": "elastico-runs",
                "state_url_secret": "elastico-state/url",
                **(extra or {}),
            },
        ),
        {},
    )
    op = ElasticoJobOperator(task_id=job.identity.task_id, workload=job.workload)
    ti = FakeTI(dag_id="pods", task_id=job.identity.task_id, run_id="run-1")
    pod = op.build_plan_pod(
        settings,
        job,
        job.plan,
        kind,
        entry_args,
        check_pod_overrides(overrides, settings.override_policy),
        fake_context(ti),
        dry_run=True,
    )
    return ApiClient().sanitize_for_serialization(pod)


def base(body: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in body["spec"]["containers"] if c["name"] == "base")


SHARINGS = ["hami", "device-plugin-mps"]


@pytest.mark.parametrize("sharing", SHARINGS)
@pytest.mark.parametrize("task", ["train", "label"])
def test_pod_validates_against_the_kubernetes_schema(pair: dict[str, Any], task: str, sharing: str) -> None:
    kind = "train" if task == "train" else "infer"
    args = (
        ("--steps", "100")
        if kind == "train"
        else ("--input", "/elastico/run/in.jsonl", "--output", "/elastico/run/out.parquet")
    )
    body = build(pair[task], kind, sharing, entry_args=args)
    kubernetes_validate.validate(body, "1.37.0", strict=True)
    assert semantic_errors(body) == []


@pytest.mark.parametrize("sharing", SHARINGS)
def test_co_located_pair_gets_its_plan(pair: dict[str, Any], sharing: str) -> None:
    for task, kind in (("train", "train"), ("label", "infer")):
        job = pair[task]
        plan = job.plan
        body = build(job, kind, sharing)
        c = base(body)
        env = {e["name"]: e.get("value") for e in c["env"]}
        # the launch contract: knobs, budget, MPS limits of a co-located job, run paths in the run volume
        assert env["ELASTICO_JOB_ID"] == job.id and env["ELASTICO_WORKLOAD"] == job.workload
        assert env["ELASTICO_KNOBS"] == plan.knobs.to_json()
        for name, value in plan.knobs.items:
            assert env[f"ELASTICO_KNOB_{name.upper()}"] == (
                str(value).lower() if isinstance(value, bool) else str(value)
            )
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={int(plan.memory_mib)}M"
        threads = int(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
        assert 1 <= threads <= 100
        assert env["ELASTICO_GPU_MEM_BUDGET_MIB"] == str(int(plan.memory_mib))
        assert env["ELASTICO_PROGRESS_FILE"] == f"/elastico/run/{job.id}/progress.jsonl"
        assert env["ELASTICO_CONTROL_FILE"] == f"/elastico/run/{job.id}/control.json"
        if kind == "train":
            assert env["PYTORCH_CUDA_ALLOC_CONF"] == f"max_split_size_mb:{int(plan.memory_mib)}"
            assert float(env["ELASTICO_MEMORY_FRACTION"]) == pytest.approx(plan.memory_mib / PAIR_GPU_MIB, abs=1e-3)
        # the command is ElastiCo's wrapper; args: entrypoint, then the plan's engine args
        assert c["command"][:2] == ["python", "-c"]
        module = "elastico_core.workloads.train" if kind == "train" else "elastico_core.workloads.infer"
        assert c["args"][0] == module
        assert tuple(c["args"][1:]) == plan.launch.args
        if kind == "infer":
            assert f"--max-num-seqs={plan.knobs['max_num_seqs']}" in c["args"]
            assert any(a.startswith("--gpu-memory-utilization=") for a in c["args"])
        # placement: the planned node, by name
        node = plan.nodes[0]
        terms = body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        assert body["spec"]["nodeSelector"]["kubernetes.io/hostname"] == node
        limits = c["resources"]["limits"]
        if sharing == "hami":
            assert body["spec"]["schedulerName"] == "hami-scheduler"
            assert body["spec"]["nodeSelector"]["gpu"] == "on"
            assert limits["nvidia.com/gpu"] == "1"
            assert limits["nvidia.com/gpumem"] == str(int(plan.memory_mib))
            assert limits["nvidia.com/gpucores"] == str(threads)  # the same SM share MPS gets
            assert body["metadata"]["annotations"]["nvidia.com/vgpu-mode"] == "hami-core"
        else:
            assert "schedulerName" not in body["spec"]
            assert body["spec"]["nodeSelector"]["nvidia.com/mps.capable"] == "true"
            assert limits["nvidia.com/gpu"] == "1" and "nvidia.com/gpumem" not in limits
        assert c["resources"]["requests"]["nvidia.com/gpu"] == limits["nvidia.com/gpu"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in body["spec"]["tolerations"]
        assert body["metadata"]["annotations"]["elastico.io/token"] == plan.token
        assert body["metadata"]["labels"]["elastico.io/job"]


def test_two_pods_of_a_pair_sum_within_the_gpu(pair: dict[str, Any]) -> None:
    limits = [
        base(build(pair[t], k, "hami"))["resources"]["limits"] for t, k in (("train", "train"), ("label", "infer"))
    ]
    assert sum(int(x["nvidia.com/gpumem"]) for x in limits) <= PAIR_GPU_MIB - 512
    assert sum(int(x["nvidia.com/gpucores"]) for x in limits) <= 100


def test_pods_run_as_non_root_with_limits_and_no_secrets(pair: dict[str, Any]) -> None:
    body = build(pair["train"], "train", "hami")
    spec = body["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 1000
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    assert "hostNetwork" not in spec or spec["hostNetwork"] is False
    for c in spec["containers"]:  # the workload and the XCom sidecar
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
        assert not sc.get("privileged")
    c = base(body)
    assert c["resources"]["limits"]["cpu"] and c["resources"]["limits"]["memory"]
    assert {v.get("hostPath") for v in spec["volumes"]} == {None}
    assert {"name": "elastico-run", "persistentVolumeClaim": {"claimName": "elastico-runs"}} in spec["volumes"]
    state_env = [e for e in c["env"] if e["name"] == "ELASTICO_STATE_URL"]
    assert state_env == [
        {"name": "ELASTICO_STATE_URL", "valueFrom": {"secretKeyRef": {"name": "elastico-state", "key": "url"}}}
    ]
    assert SECRET not in repr(body)
    assert any(c["name"] == "airflow-xcom-sidecar" for c in spec["containers"])


def test_hami_pins_planned_gpu_by_uuid(pair: dict[str, Any]) -> None:
    gpu = pair["train"].plan.gpus[0]
    body = build(pair["train"], "train", "hami", extra={"gpu_uuids": {gpu: "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"}})
    assert body["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] == "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
    kubernetes_validate.validate(body, "1.37.0", strict=True)


def test_allowed_overrides_reach_the_pod(pair: dict[str, Any]) -> None:
    body = build(
        pair["train"],
        "train",
        "hami",
        extra={"user_key_domains": ["example.com"], "priority_classes": ["batch-low"]},
        overrides={
            "labels": {"team": "vision"},
            "annotations": {"example.com/owner": "ana"},
            "env": {"APP_MODE": "offline"},
            "cpu": "4",
            "memory": "16Gi",
            "priority_class_name": "batch-low",
        },
    )
    kubernetes_validate.validate(body, "1.37.0", strict=True)
    assert semantic_errors(body) == []
    c = base(body)
    assert body["metadata"]["labels"]["team"] == "vision"
    assert body["metadata"]["annotations"]["example.com/owner"] == "ana"
    assert {"name": "APP_MODE", "value": "offline"} in c["env"]
    assert c["resources"]["limits"]["cpu"] == "4" and c["resources"]["limits"]["memory"] == "16Gi"
    assert body["spec"]["priorityClassName"] == "batch-low"


def test_exclusive_refuses_a_co_located_plan(pair: dict[str, Any]) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="exclusive"):
        build(pair["train"], "train", "exclusive")


def test_pod_resources_for_a_solo_multi_gpu_plan() -> None:
    from elastico_airflow.pod_resources import PlanPlacement, pod_resources
    from elastico_airflow.settings import GpuSharing

    plan = PlanPlacement(("n1/0", "n1/1"), ("n1", "n1"), 20000.4, (), {"ELASTICO_DP": "2"})
    hami = pod_resources(plan, GpuSharing.HAMI)
    assert hami.resources.limits["nvidia.com/gpu"] == "2" and hami.resources.limits["nvidia.com/gpumem"] == "20000"
    assert "nvidia.com/gpucores" not in hami.resources.limits  # alone: neither throttled nor exclusive
    excl = pod_resources(plan, GpuSharing.EXCLUSIVE)
    assert excl.resources.limits["nvidia.com/gpu"] == "2" and excl.scheduler_name is None
    from elastico_airflow.pod_resources import PlacementError

    with pytest.raises(PlacementError, match="replicas"):
        pod_resources(plan, GpuSharing.DEVICE_PLUGIN_MPS)
    with pytest.raises(PlacementError, match="span nodes"):
        pod_resources(PlanPlacement(("a/0", "b/0"), ("a", "b"), 1000, (), {}), GpuSharing.HAMI)


SOLO_NODE = """\
cluster:
  name: solo
  m_sys_mib: 512
  max_jobs_per_gpu: 2
  nodes:
    - {name: gpu-node-1, count: 1, gpu: a100-40gb, gpus: 1, cpu_cores: 16, host_mem_gib: 64}
"""


@pytest.fixture(scope="module")
def solo(pair: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The pair's training job (same identity, so the same id) planned alone on another node with the other
    micro-batch: the plan a switch would relaunch it with."""
    from elastico_core.state import ExternalIdentity, JobService

    tmp = tmp_path_factory.mktemp("solo")
    (tmp / "cluster.yaml").write_text(SOLO_NODE)
    url = f"sqlite:///{tmp / 'state.db'}"
    other = 32 if pair["train"].plan.knobs["micro_batch"] == 64 else 64
    svc = JobService.open(url)
    job_id = svc.register(
        {"workload": "bert", "floor": 50, "knobs": {"micro_batch": [other], "checkpointing": [True]}},
        ExternalIdentity.airflow("pods", "run-1", "train"),
        try_number=1,
    ).job.id
    run_epochs(url, tmp / "cluster.yaml", Path(__file__).resolve().parents[2] / "profiles", n=1)
    job = svc.get(job_id)
    svc.close()
    assert job.id == pair["train"].id and job.plan is not None and not job.plan.partners, job.reason
    return job


def _launching_operator(created: list[Any], **kpo: Any) -> Any:
    """An operator whose Kubernetes client, hook and pod manager are fakes: KPO's execute_async runs for real
    and every pod it creates lands in ``created``."""
    from unittest import mock

    from elastico_airflow.operators import ElasticoJobOperator

    op = ElasticoJobOperator(task_id="train", workload="bert", **kpo)
    client = mock.MagicMock()
    client.list_namespaced_pod.return_value = mock.MagicMock(items=[])  # no earlier pod: each launch creates one
    manager = mock.MagicMock()
    manager.create_pod.side_effect = lambda pod: created.append(pod) or pod
    manager.extract_xcom.return_value = '{"exit_code": 0, "events": [{"event": "done", "step": 1, "samples": 1}]}'
    hook = mock.MagicMock(is_in_cluster=False)
    hook.get_xcom_sidecar_container_image.return_value = None
    hook.get_xcom_sidecar_container_resources.return_value = None
    op.__dict__.update(client=client, pod_manager=manager, hook=hook)
    op.await_pod_start = lambda pod: None  # type: ignore[method-assign]
    return op


def test_kpo_builds_each_launch_from_its_own_plan_and_keeps_the_authors_fields(pair: dict[str, Any], solo: Any) -> None:
    """Two launches of one task (a co-located plan, then a solo plan on another node, as after a switch):
    each pod is KPO's ``build_pod_request_obj`` patched with that launch's plan; the DAG author's own KPO
    label, annotation, volume, mount, env and toleration stay in both; nothing of the first plan is left in
    the second pod or in the operator."""
    from unittest import mock

    from airflow.sdk.exceptions import TaskDeferred
    from kubernetes.client import models as k8s

    from elastico_airflow.settings import ConnectionFields, resolve_settings

    settings = resolve_settings(
        ConnectionFields(
            conn_type="elastico",
            extra={"launcher": "kubernetes", "namespace": "ml-batch", "image": "registry.example/elastico:1.0"},
        ),
        {},
    )
    datasets = k8s.V1Volume(
        name="datasets", persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(claim_name="datasets")
    )
    pool = k8s.V1Toleration(key="example.com/pool", operator="Equal", value="batch", effect="NoSchedule")
    created: list[Any] = []
    op = _launching_operator(
        created,
        entry_args=["--steps", "10"],
        labels={"team": "vision"},
        annotations={"example.com/owner": "ana"},
        volumes=[datasets],
        volume_mounts=[k8s.V1VolumeMount(name="datasets", mount_path="/data", read_only=True)],
        env_vars=[k8s.V1EnvVar(name="AUTHOR_SETTING", value="1")],
        tolerations=[pool],
    )
    ctx = fake_context(FakeTI(dag_id="pods", task_id="train", run_id="run-1"))
    svc = mock.MagicMock()
    first, second = pair["train"], solo
    for job in (first, second):
        with pytest.raises(TaskDeferred) as deferral:  # KPO's deferrable path: created, then the watch
            op._start(ctx, svc, settings, job, job.plan, 0)
        watched = deferral.value.trigger.serialize()[1]["launch"]
        assert watched["token"] == job.plan.token and watched["where"]["name"] == created[-1].metadata.name
        assert op._launch is None  # the plan lives for its launch only
        svc.report_started.assert_called_with(job.id, job.plan.token)
    assert len(created) == 2
    bodies = [ApiClient().sanitize_for_serialization(pod) for pod in created]
    for job, body in zip((first, second), bodies, strict=True):
        kubernetes_validate.validate(body, "1.37.0", strict=True)
        assert semantic_errors(body) == []
        plan, c, spec, meta = job.plan, base(body), body["spec"], body["metadata"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        # the planner's knobs, budget and launch arguments
        assert env["ELASTICO_KNOBS"] == plan.knobs.to_json()
        assert env["ELASTICO_KNOB_MICRO_BATCH"] == str(plan.knobs["micro_batch"])
        assert env["ELASTICO_GPU_MEM_BUDGET_MIB"] == str(int(plan.memory_mib))
        assert {k: v for k, v in env.items() if k in plan.launch.env_dict()} == plan.launch.env_dict()
        assert c["args"] == ["elastico_core.workloads.train", "--steps", "10", *plan.launch.args]
        assert c["image"] == "registry.example/elastico:1.0" and meta["namespace"] == "ml-batch"
        # its resources and placement
        assert c["resources"]["limits"]["nvidia.com/gpumem"] == str(int(plan.memory_mib))
        assert spec["nodeSelector"]["kubernetes.io/hostname"] == plan.nodes[0]
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [plan.nodes[0]]}]}]
        assert meta["annotations"]["elastico.io/token"] == plan.token
        assert json.loads(meta["annotations"]["elastico.io/plan"])["partners"] == list(plan.partners)
        # KPO's own parts: the labels it finds its pods by, the XCom sidecar and its volume
        assert meta["labels"]["dag_id"] == "pods" and meta["labels"]["task_id"] == "train"
        assert [x["name"] for x in spec["containers"]] == ["base", "airflow-xcom-sidecar"]
        # the author's KPO arguments, each once
        assert meta["labels"]["team"] == "vision" and meta["annotations"]["example.com/owner"] == "ana"
        assert [v["name"] for v in spec["volumes"]].count("datasets") == 1
        assert {"name": "datasets", "mountPath": "/data", "readOnly": True} in c["volumeMounts"]
        assert [e["name"] for e in c["env"]].count("AUTHOR_SETTING") == 1
        assert (
            spec["tolerations"].count(
                {"key": "example.com/pool", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}
            )
            == 1
        )
        assert sorted(v["name"] for v in spec["volumes"]) == ["datasets", "elastico-run", "xcom"]
    # the first plan was co-located (an SM share), the second is alone on another node: none of it is left
    one, two = bodies
    assert "nvidia.com/gpucores" in base(one)["resources"]["limits"]
    assert "nvidia.com/gpucores" not in base(two)["resources"]["limits"]
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in {e["name"] for e in base(two)["env"]}
    assert first.plan.nodes[0] not in json.dumps(two["spec"])
    assert base(one)["env"] != base(two)["env"] and first.plan.knobs != second.plan.knobs
    # the operator's KPO arguments are the author's, as before the launches
    assert op.labels == {"team": "vision"} and op.annotations == {"example.com/owner": "ana"}
    assert op.volumes == [datasets] and op.tolerations == [pool]
    assert not op.cmds and not op.arguments and op.container_resources is None and op.node_selector == {}
    bare = op.build_pod_request_obj(ctx, dry_run=True)  # outside a launch: KPO's pod of the author's arguments
    assert "elastico.io/token" not in (bare.metadata.annotations or {}) and not bare.spec.containers[0].command
