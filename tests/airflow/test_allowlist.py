"""A DAG param that is malformed or reaches for pod fields outside the allow-list is refused before launch."""

from __future__ import annotations

from typing import Any

import pytest

from tests.airflow.conftest import Env, FakeTI, fake_context

REFUSED = [
    ({"image": "evil:latest"}, "'image' is not allowed"),
    ({"cmds": ["sh", "-c", "curl x | sh"]}, "'cmds' is not allowed"),
    ({"command": ["sh"]}, "'command' is not allowed"),
    ({"arguments": ["--knobs", "{}"]}, "'arguments' is not allowed"),
    ({"privileged": True}, "'privileged' is not allowed"),
    ({"security_context": {"runAsUser": 0}}, "'security_context' is not allowed"),
    ({"host_path": "/var/run/docker.sock"}, "'host_path' is not allowed"),
    ({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}, "'volumes' is not allowed"),
    ({"host_network": True}, "'host_network' is not allowed"),
    ({"service_account_name": "cluster-admin"}, "'service_account_name' is not allowed"),
    ({"node_selector": {"x": "y"}}, "'node_selector' is not allowed"),
    ({"resources": {"limits": {"nvidia.com/gpu": "8"}}}, "'resources' is not allowed"),
    ({"env": {"LD_PRELOAD": "/tmp/x.so"}}, "'LD_PRELOAD' is refused"),
    ({"env": {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}}, "refused"),
    ({"env": {"ELASTICO_KNOBS": "{}"}}, "refused"),
    ({"env": {"bad name": "x"}}, "not an environment variable name"),
    ({"labels": {"elastico.io/job": "other"}}, "reserved domain"),
    ({"labels": {"team": "x" * 64}}, "not a valid label value"),
    ({"annotations": {"nvidia.com/use-gpuuuid": "GPU-1"}}, "reserved domain"),
    ({"cpu": "lots"}, "not a CPU quantity"),
    ({"cpu": "1000"}, "not a CPU quantity"),
    ({"memory": "1Pi"}, "not a memory quantity"),
    ({"priority_class_name": "Bad_Name"}, "not a DNS subdomain"),
    ({"launcher": "local"}, "'launcher' is not allowed"),
    ("not-an-object", "must be an object"),
]


@pytest.mark.parametrize(("raw", "message"), REFUSED, ids=[str(r)[:40] for r, _ in REFUSED])
def test_pod_overrides_outside_the_allow_list_are_refused(raw: Any, message: str) -> None:
    from elastico_airflow.allowlist import PodOverrideError, check_pod_overrides

    with pytest.raises(PodOverrideError, match=message.replace("(", r"\(")):
        check_pod_overrides(raw)


def test_allowed_pod_overrides() -> None:
    from elastico_airflow.allowlist import check_pod_overrides

    got = check_pod_overrides(
        {"labels": {"team": "nlp"}, "env": {"HF_HUB_OFFLINE": "1"}, "cpu": "500m", "memory": "4Gi"}
    )
    assert got.labels == (("team", "nlp"),) and got.env == (("HF_HUB_OFFLINE", "1"),)
    assert check_pod_overrides(None) == check_pod_overrides({})


@pytest.mark.parametrize(
    ("kind", "args", "message"),
    [
        ("train", ["--knobs", '{"micro_batch": 4096}'], "'--knobs' is not allowed"),
        ("train", ["--checkpoint-dir", "/"], "not allowed"),
        ("infer", ["--max-num-seqs", "64"], "'--max-num-seqs' is not allowed"),
        ("infer", ["--gpu-memory-utilization=1.0"], "not allowed"),
        ("infer", ["--input"], "needs a value"),
        ("infer", ["--stop-at-newline=yes"], "takes no value"),
    ],
)
def test_entry_args_outside_the_allow_list_are_refused(kind: str, args: list[str], message: str) -> None:
    from elastico_airflow.launchspec import EntryArgsError, check_entry_args

    with pytest.raises(EntryArgsError, match=message):
        check_entry_args(kind, args)


def test_dag_params_reject_malformed_and_disallowed_conf() -> None:
    """The DAGs' Param schemas refuse a bad conf when the run is created (what the REST API and CLI do)."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.definitions.param import ParamsDict

    bag = DagBag(dag_folder=str(__import__("tests.airflow.conftest", fromlist=["DAGS"]).DAGS))
    assert bag.import_errors == {}
    bad = {
        "training_runs": [
            {"pod_overrides": {"image": "evil"}},
            {"pod_overrides": {"privileged": True}},
            {"models": [{"name": "x", "workload": "resnet50", "floor": -1}]},
            {"models": [{"name": "x", "workload": "not-a-model", "floor": 1}]},
            {"models": [{"name": "x", "workload": "bert", "floor": 1, "knobs": {"warp_speed": [9]}}]},
            {"models": [{"name": "x", "workload": "bert", "floor": 1, "image": "evil"}]},
            {"steps": "many"},
            {"launcher": "ssh"},
        ],
        "batch_labeling": [{"shards": 0}, {"knobs": {"max_num_seqs": "4"}}, {"pod_overrides": {"cmds": ["sh"]}}],
        "mixed_cluster_day": [{"max_jobs": 0}, {"pod_overrides": {"service_account_name": "admin"}}],
    }
    for dag_id, confs in bad.items():
        params = bag.dags[dag_id].params
        ParamsDict(params).validate()  # the defaults are valid
        for conf in confs:
            candidate = ParamsDict(params)
            with pytest.raises(Exception) as err:
                candidate.update(conf)
                candidate.validate()
            assert type(err.value).__name__ == "ParamValidationError", conf


def test_operator_rejects_before_registering(elastico_env: Env) -> None:
    """Even without the schemas (a templated value), the operator refuses before touching the state."""
    from airflow.sdk.exceptions import AirflowFailException

    from elastico_airflow.operators import ElasticoJobOperator
    from elastico_core.state import JobService

    cases = [
        ({"pod_overrides": {"image": "evil:1"}}, "'image' is not allowed"),
        ({"pod_overrides": {"host_path": "/"}}, "'host_path' is not allowed"),
        ({"entry_args": ["--knobs", "{}"]}, "'--knobs' is not allowed"),
        ({"workload": "warp-drive"}, "unknown workload"),
        ({"launcher": "ssh"}, "not 'kubernetes' or 'local'"),
        ({"floor": -5}, "invalid job spec"),
        ({"knobs": {"micro_batch": [3]}}, "invalid job spec"),
    ]
    for i, (kwargs, message) in enumerate(cases):
        args = {"workload": "lstm", "floor": 1.0, **kwargs}
        op = ElasticoJobOperator(task_id=f"t{i}", **args)
        with pytest.raises(AirflowFailException, match=message):
            op.execute(fake_context(FakeTI(task_id=f"t{i}")))
    svc = JobService.open(elastico_env.state_url)
    try:
        assert svc.list_jobs() == ()  # nothing registered, nothing launched
    finally:
        svc.close()
    assert not elastico_env.workdir.exists() or not any(elastico_env.workdir.iterdir())


def test_param_workload_names_match_the_catalog() -> None:
    from elastico_airflow.params import INFER_WORKLOADS, TRAIN_WORKLOADS
    from elastico_core.model.workload import JobKind
    from elastico_core.rst.catalog import PAPER_WORKLOADS

    assert set(TRAIN_WORKLOADS) == {w.name for w in PAPER_WORKLOADS.values() if w.kind is JobKind.TRAIN}
    assert set(INFER_WORKLOADS) == {w.name for w in PAPER_WORKLOADS.values() if w.kind is JobKind.INFER}
