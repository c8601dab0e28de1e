"""Frozen values validate what they hold and name the offending field."""

from __future__ import annotations

import math

import pytest

from elastico_core.model import (
    ChangeKind,
    Cluster,
    JobSpec,
    Knobs,
    KnobSpec,
    Node,
    ResourceVector,
    SpecError,
    change_kind,
    gpu_model,
    narrow_space,
)
from elastico_core.model.launch import knob_env_name, knob_env_value, parse_knob_env
from elastico_core.rst.catalog import PAPER_WORKLOADS

BERT = PAPER_WORKLOADS["bert"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"sm": -0.1, "gpu_mem_mib": 1, "cpu_cores": 1, "host_mem_mib": 1}, "sm"),
        ({"sm": 1.5, "gpu_mem_mib": 1, "cpu_cores": 1, "host_mem_mib": 1}, "sm"),
        ({"sm": 0.5, "gpu_mem_mib": math.nan, "cpu_cores": 1, "host_mem_mib": 1}, "gpu_mem_mib"),
        ({"sm": 0.5, "gpu_mem_mib": 1, "cpu_cores": -1, "host_mem_mib": 1}, "cpu_cores"),
    ],
    ids=["negative-sm", "sm-above-one", "nan-memory", "negative-cpu"],
)
def test_resource_vector_rejects(kwargs: dict, field: str) -> None:
    with pytest.raises(SpecError) as err:
        ResourceVector(**kwargs)
    assert err.value.field == field


def test_knobs_are_canonical_and_hashable() -> None:
    a = Knobs.of({"amp": True, "micro_batch": 64})
    b = Knobs.of({"micro_batch": 64, "amp": True})
    assert a == b and hash(a) == hash(b)
    assert a.to_json() == '{"amp":true,"micro_batch":64}'
    assert Knobs.from_json(a.to_json()) == a
    assert a.with_(amp=False)["amp"] is False


def test_knob_grid_tells_bool_from_number() -> None:
    spec = KnobSpec("micro_batch", (1, 2, 4))
    with pytest.raises(SpecError, match="outside the grid"):
        spec.restricted((True,))
    assert spec.restricted((4, 1)).values == (1, 4)  # grid order kept


@pytest.mark.parametrize(
    ("old", "new", "kind"),
    [
        ({"prefix_caching": False}, {"prefix_caching": True}, ChangeKind.FLAG_TOGGLE),
        ({"prefix_caching": False, "max_num_seqs": 2}, {"prefix_caching": True, "max_num_seqs": 4}, ChangeKind.ENGINE_RESTART),
        ({"max_num_seqs": 2}, {"max_num_seqs": 2}, None),
    ],
    ids=["flag", "engine-wins-over-flag", "unchanged"],
)
def test_change_kind_is_the_costliest_change(old: dict, new: dict, kind: ChangeKind | None) -> None:
    specs = PAPER_WORKLOADS["qwen-1.7b"].knobs
    assert change_kind(specs, Knobs.of(old), Knobs.of(new)) == kind


def test_job_spec_validation_names_job_and_field() -> None:
    with pytest.raises(SpecError) as err:
        JobSpec("bert-1", BERT, floor=-1.0)
    assert err.value.where == "job 'bert-1'" and err.value.field == "floor"
    with pytest.raises(SpecError) as err:
        JobSpec("bad id!", BERT)
    assert err.value.field == "id"
    with pytest.raises(SpecError, match="integer >= 1"):
        JobSpec("x", BERT, max_gpus=0)


def test_job_space_caps_data_parallel_degree() -> None:
    job = JobSpec("t", PAPER_WORKLOADS["transformer"], max_gpus=4)
    dp = next(s for s in job.knob_space if s.name == "dp")
    assert dp.values == (1, 2, 4)
    assert job.default_knobs["dp"] == 4
    with pytest.raises(SpecError, match="unknown knob 'colour'"):
        narrow_space(BERT, {"colour": ["red"]}, 1)


def test_cluster_needs_gpus_and_unique_nodes() -> None:
    a100 = gpu_model("a100")
    with pytest.raises(SpecError, match="no GPUs"):
        Cluster("c", (Node("n0", a100, 0, 8, 1024),))
    with pytest.raises(SpecError, match="duplicate node"):
        Cluster("c", (Node("n0", a100, 1, 8, 1024), Node("n0", a100, 1, 8, 1024)))
    c = Cluster("c", (Node("n0", a100, 2, 8, 1024),))
    assert [g.id for g in c.gpus] == ["n0/0", "n0/1"]
    assert c.usable_mem_mib(a100) == 40960 - 512


def test_launch_contract_round_trips() -> None:
    knobs = Knobs.of({"amp": True, "micro_batch": 64, "checkpointing": False})
    env = {knob_env_name(k): knob_env_value(v) for k, v in knobs.items}
    assert env["ELASTICO_KNOB_AMP"] == "true"
    assert parse_knob_env(env) == knobs
    assert parse_knob_env({"ELASTICO_KNOBS": knobs.to_json(), "ELASTICO_KNOB_AMP": "false"}) == knobs
