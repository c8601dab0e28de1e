"""§4.2: memory budgets become framework-native launch settings."""

from __future__ import annotations

import pytest

from elastico_core.bench.instances import make_cluster
from elastico_core.model import ElasticoError, JobSpec, Knobs, ResourceVector
from elastico_core.model.plan import Placement
from elastico_core.pds.budgets import launch_settings, mps_thread_percentage, plan_launch_settings
from elastico_core.pds.planner import Planner, PlanningInput
from elastico_core.rst.catalog import PAPER_WORKLOADS as W
from elastico_core.rst.store import ProfileStore

CLUSTER = make_cluster(2)


def placement(job: str, knobs: Knobs, mem: float, sm: float, partners: tuple[str, ...] = ()) -> Placement:
    return Placement(job, knobs, ("node-0/0",), ResourceVector(sm, mem, 4, 8192), 100.0, 1.0, 0.0, partners)


def test_training_alone_gets_allocator_caps_and_no_mps() -> None:
    p = placement("bert", W["bert"].defaults.with_(checkpointing=True), 24576.0, 0.5)
    env = launch_settings(p, W["bert"], CLUSTER).env_dict()
    assert env["ELASTICO_GPU_MEM_BUDGET_MIB"] == "24576"
    assert env["ELASTICO_MEMORY_FRACTION"] == f"{24576 / 40960:.4f}"
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:24576"
    assert env["ELASTICO_KNOB_CHECKPOINTING"] == "true" and env["ELASTICO_DP"] == "1"
    assert not any(k.startswith("CUDA_MPS") for k in env)


def test_colocated_pair_gets_mps_limits_that_add_up() -> None:
    a = placement("bert", W["bert"].defaults, 22528.0, 0.45, ("qwen",))
    b = placement("qwen", W["qwen-1.7b"].defaults.with_(gpu_memory_utilization=0.4), 16384.0, 0.35, ("bert",))
    ea = launch_settings(a, W["bert"], CLUSTER, (b,))
    eb = launch_settings(b, W["qwen-1.7b"], CLUSTER, (a,))
    assert ea.env_dict()["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=22528M"
    assert eb.env_dict()["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=16384M"
    pa = int(ea.env_dict()["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
    pb = int(eb.env_dict()["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
    assert pa + pb == 100 and pa > pb
    assert "--gpu-memory-utilization=0.400" in eb.args and "--no-enable-prefix-caching" in eb.args
    assert "--max-num-seqs=4" in eb.args and "--max-model-len=16384" in eb.args


def test_over_budget_pair_is_refused() -> None:
    a = placement("a", W["bert"].defaults, 30000.0, 0.4, ("b",))
    b = placement("b", W["bert"].defaults, 15000.0, 0.4, ("a",))
    with pytest.raises(ElasticoError, match="after M_sys"):
        launch_settings(a, W["bert"], CLUSTER, (b,))


@pytest.mark.parametrize(("own", "other", "expect"), [(0.5, 0.5, 50), (0.3, 0.1, 60), (0.9, 0.6, 60), (0.0, 1.0, 1)])
def test_mps_percentage(own: float, other: float, expect: int) -> None:
    assert mps_thread_percentage(own, other) == expect


def test_every_placement_of_a_plan_maps(store: ProfileStore) -> None:
    jobs = tuple(JobSpec(n, W[n]) for n in ("resnet50", "bert", "ppo", "ncf", "qwen-1.7b"))
    plan = Planner(store).plan(PlanningInput(CLUSTER, jobs))
    launch = plan_launch_settings(plan, {j.id: j.workload for j in jobs}, CLUSTER)
    assert set(launch) == {p.job_id for p in plan.placements}
    for p in plan.placements:
        env = launch[p.job_id].env_dict()
        assert ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" in env) == bool(p.partners)


def test_vllm_accepts_the_engine_arguments() -> None:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    p = placement("qwen", W["qwen-1.7b"].defaults.with_(gpu_memory_utilization=0.4, prefix_caching=True), 16384.0, 0.35)
    args = launch_settings(p, W["qwen-1.7b"], CLUSTER).args
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    ns = parser.parse_args(["--model", "x", *args])
    engine = EngineArgs.from_cli_args(ns)
    assert engine.max_num_seqs == 4 and engine.gpu_memory_utilization == 0.4 and engine.enable_prefix_caching
    tp = placement("qwen", W["qwen-1.7b"].defaults.with_(tensor_parallel_size=2), 16384.0, 0.35)
    ns = parser.parse_args(["--model", "x", *launch_settings(tp, W["qwen-1.7b"], CLUSTER).args])
    assert EngineArgs.from_cli_args(ns).tensor_parallel_size == 2
