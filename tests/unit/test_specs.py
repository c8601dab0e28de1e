"""File formats: every mistake is one SpecError naming the file, the job and the field."""

from __future__ import annotations

import pytest

from elastico_core.bench.instances import make_cluster
from elastico_core.model import SpecError
from elastico_core.specs import parse_cluster, parse_jobs, parse_running

CLUSTER = "cluster: {nodes: [{name: n, count: 2, gpu: a100-40gb, gpus: 4}]}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("jobs: [{id: a, workload: gpt-9}]", "jobs.yaml: job 'a': workload: unknown workload 'gpt-9'"),
        ("jobs: [{id: a, workload: bert, knobs: {micro_batch: []}}]", "jobs.yaml: job 'a': knobs: Value error, empty knob space"),
        ("jobs: [{id: a, workload: bert, knobs: {micro_batch: [48]}}]", "jobs.yaml: job 'a': knobs.micro_batch: values [48] are outside"),
        ("jobs: [{id: a, workload: bert, floor: -3}]", "jobs.yaml: job 'a': floor: Input should be greater than or equal to 0"),
        ("jobs: [{id: a, workload: bert, weight: many}]", "jobs.yaml: job 'a': weight: Input should be a valid number"),
        ("jobs: [{id: a, workload: bert}, {id: a, workload: ppo}]", "jobs.yaml: job 'a': id: duplicate job id"),
        ("jobs: [{id: a, workload: bert, gpu: 2}]", "jobs.yaml: job 'a': gpu: unknown field"),
        ("jobs: [{workload: bert}]", "jobs.yaml: job #1: id: required field is missing"),
        ("jobs: [{id: a, workload: bert", "jobs.yaml: malformed YAML at line "),
        ("- just a list", "jobs.yaml: expected a mapping"),
    ],
    ids=["unknown-workload", "empty-space", "outside-grid", "negative-floor", "non-numeric", "duplicate", "typo-key",
         "missing-id", "malformed-yaml", "not-a-mapping"],
)
def test_bad_jobs(text: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_jobs(text, "jobs.yaml")
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cluster: {nodes: []}", "c.yaml: nodes: the cluster has no GPUs"),
        ("cluster: {nodes: [{name: n, gpu: v100, gpus: 1}]}", "c.yaml: node 'n': gpu: unknown GPU model 'v100'"),
        ("cluster: {nodes: [{name: n, gpu: a100, gpus: -1}]}", "c.yaml: node 'n': gpus: Input should be greater than or equal to 0"),
        ("cluster: {nodes: [{name: Node_A, gpu: a100, gpus: 1}]}", "c.yaml: node #1: name: node names are lower-case"),
        ("cluster: {m_sys_mib: 50000, nodes: [{name: n, gpu: a100, gpus: 1}]}", "c.yaml: m_sys_mib: m_sys_mib 50000 leaves nothing"),
    ],
    ids=["no-gpus", "unknown-gpu", "negative-gpus", "bad-node-name", "m-sys-too-big"],
)
def test_bad_clusters(text: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_cluster(text, "c.yaml")
    assert str(err.value).startswith(message), str(err.value)


def test_custom_workload_in_yaml_is_calibrated_and_usable() -> None:
    text = """
workloads:
  - name: vit-small
    kind: train
    params: 22000000
    knobs:
      micro_batch: [64, 128, 256]
      checkpointing: [false, true]
      amp: [false, true]
    shape: {memory_gib: [6, 18], gflops_per_sample: 13.8, mfu: 0.2}
jobs:
  - {id: vit-1, workload: vit-small, floor: 100, knobs: {micro_batch: [128, 256]}}
"""
    jobs, workloads = parse_jobs(text, "jobs.yaml")
    assert "vit-small" in workloads
    assert [s.values for s in jobs[0].knob_space if s.name == "micro_batch"] == [(128, 256)]


def test_custom_workload_needs_estimator_knobs() -> None:
    text = "workloads: [{name: x, kind: infer, params: 10, knobs: {batch: [1]}}]\njobs: []"
    with pytest.raises(SpecError, match="needs the knobs"):
        parse_jobs(text, "jobs.yaml")


def test_running_state_is_checked_against_jobs_and_cluster() -> None:
    jobs, _ = parse_jobs("jobs: [{id: a, workload: bert}]", "jobs.yaml")
    cluster = make_cluster(2)
    ok = '{"jobs": [{"id": "a", "knobs": {"micro_batch": 64, "checkpointing": false, "amp": true, "dp": 1}, "gpus": ["node-0/1"]}]}'
    running, prices = parse_running(ok, "r.json", jobs, cluster)
    assert running["a"].gpus == ("node-0/1",) and prices is None
    for text, message in [
        ('{"jobs": [{"id": "zz", "knobs": {}, "gpus": ["node-0/0"]}]}', "running job 'zz': id: not in the job file"),
        ('{"jobs": [{"id": "a", "knobs": {}, "gpus": ["node-9/0"]}]}', "GPUs ['node-9/0'] are not in the cluster"),
        ('{"jobs": [{"id": "a", "knobs": {"colour": 1}, "gpus": ["node-0/0"]}]}', "unknown knobs ['colour']"),
        ('{"jobs": [', "malformed JSON"),
    ]:
        with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
            parse_running(text, "r.json", jobs, cluster)


# ---- bounds: input that used to escape the one-line errors ----------------------------------------
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cluster: {nodes: [{name: n, gpu: a100, gpus: 1000000000}]}", "c.yaml: node 'n': gpus: Input should be less than or equal to 64"),
        ("cluster: {nodes: [{name: n, count: 20001, gpu: a100, gpus: 1}]}", "c.yaml: node 'n': count: Input should be less than or equal to 20000"),
        ("cluster: {nodes: [{name: a, count: 20000, gpu: a100, gpus: 8}]}", "c.yaml: nodes: 160000 GPUs in all; the limit is 100000"),
        ("cluster: {nodes: [{name: a, count: 15000, gpu: a100, gpus: 1}, {name: b, count: 15000, gpu: a100, gpus: 1}]}",
         "c.yaml: nodes: 30000 nodes in all; the limit is 20000"),
    ],
    ids=["gpus-per-node", "node-count", "cluster-gpus", "cluster-nodes"],
)
def test_cluster_bounds(text: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_cluster(text, "c.yaml")
    assert str(err.value).startswith(message), str(err.value)


TRAIN = "workloads: [{{name: w, kind: train, params: 1000000, knobs: {{micro_batch: {mb}}}, shape: {{memory_gib: [2, 8]}}}}]\n"
INFER = ("workloads: [{{name: w, kind: infer, params: 1000000, knobs: {{max_num_seqs: {seqs}, max_model_len: [2048], "
         "gpu_memory_utilization: {util}}}}}]\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (TRAIN.format(mb="[0, -1]"), "knobs.micro_batch: values are positive integers, got 0"),
        (TRAIN.format(mb="['64', '128']"), "knobs.micro_batch: knob values are numbers or booleans, got the string '64'"),
        (TRAIN.format(mb="[64.5]"), "knobs.micro_batch: values are positive integers"),
        (TRAIN.format(mb="[true]"), "knobs.micro_batch: is a number, got True"),
        (INFER.format(seqs="[8, 'x']", util="[0.9]"), "knobs.max_num_seqs: knob values are numbers or booleans"),
        (INFER.format(seqs="[8]", util="[1.5]"), "knobs.gpu_memory_utilization: values are fractions in (0, 1]"),
        (INFER.format(seqs="[8]", util="[0]"), "knobs.gpu_memory_utilization: values are fractions in (0, 1]"),
    ],
    ids=["non-positive", "strings", "fractional-batch", "bool-batch", "string-seqs", "util-above-1", "util-zero"],
)
def test_custom_workload_knob_values_are_checked_at_parse_time(text: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_jobs(text + "jobs: [{id: a, workload: w}]", "jobs.yaml")
    assert "jobs.yaml: workload 'w'" in str(err.value) and message in str(err.value), str(err.value)


def test_trace_fields_have_a_length_limit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from elastico_core.sim.trace import MAX_FIELD_CHARS, load_trace

    path = tmp_path / "t.csv"
    head = "job_id,submit_time_s,duration_s,num_gpus,kind\n"
    for long in (MAX_FIELD_CHARS + 1, 131_073):
        path.write_text(head + f"{'j' * long},0,10,1,train\n")
        with pytest.raises(SpecError) as err:
            load_trace(path)
        text = str(err.value)
        assert "line 2" in text and "\n" not in text and len(text) < 300, text
