"""Memory-budget mapping (§4.2): a placement becomes framework-native launch settings.

Pure functions: the operator, the local launcher and the simulator all call ``launch_settings``.
"""

from __future__ import annotations

import math

from elastico_core.model.cluster import Cluster
from elastico_core.model.errors import ElasticoError
from elastico_core.model.launch import (
    ENV_DP,
    ENV_JOB_ID,
    ENV_KNOBS,
    ENV_MEM_BUDGET,
    ENV_MEM_FRACTION,
    ENV_MPS_MEM,
    ENV_MPS_THREADS,
    ENV_TORCH_ALLOC,
    ENV_WORKLOAD,
    LaunchSettings,
    knob_env_name,
    knob_env_value,
)
from elastico_core.model.plan import Placement, Plan
from elastico_core.model.workload import JobKind, Workload

VLLM_ARGS = {
    "max_num_seqs": "--max-num-seqs",
    "max_model_len": "--max-model-len",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "tensor_parallel_size": "--tensor-parallel-size",
}


def mps_thread_percentage(own_sm: float, partner_sm: float) -> int:
    """Each co-located job gets its SM share plus half of the slack, so the two shares sum to 100."""
    slack = max(0.0, 1.0 - own_sm - partner_sm)
    total = own_sm + partner_sm
    share = own_sm + slack / 2 if total <= 1.0 else own_sm / total
    return max(1, min(100, round(100 * share)))


def launch_settings(placement: Placement, workload: Workload, cluster: Cluster, partners: tuple[Placement, ...] = ()) -> LaunchSettings:
    """Env and args that enforce ``placement``'s memory budget with the framework's own caps.

    ``partners`` are the placements sharing any of its GPUs; each GPU is checked against the partners
    on that GPU only, and the MPS share follows the busiest of them.
    """
    budget = placement.resources.gpu_mem_mib
    device_mib = 0
    busiest_sm = 0.0
    for gpu_id in placement.gpus:
        gpu = cluster.gpu(gpu_id)
        if gpu is None:
            raise ElasticoError(f"job {placement.job_id!r}: GPU {gpu_id!r} is not in the cluster")
        device_mib = device_mib or gpu.model.memory_mib
        here = [p for p in partners if gpu_id in p.gpus]
        partner_mib = sum(p.resources.gpu_mem_mib for p in here)
        busiest_sm = max(busiest_sm, sum(p.resources.sm for p in here))
        if budget + partner_mib > gpu.model.memory_mib - cluster.m_sys_mib + 1e-6:
            raise ElasticoError(
                f"job {placement.job_id!r}: {budget:.0f} + {partner_mib:.0f} MiB exceed {gpu.id}'s "
                f"{gpu.model.memory_mib - cluster.m_sys_mib} MiB after M_sys"
            )
    knobs = placement.knobs
    env: dict[str, str] = {
        ENV_JOB_ID: placement.job_id,
        ENV_WORKLOAD: workload.name,
        ENV_KNOBS: knobs.to_json(),
        ENV_MEM_BUDGET: str(math.floor(budget)),
    }
    for name, value in knobs.items:
        env[knob_env_name(name)] = knob_env_value(value)
    args: list[str] = []
    if workload.kind is JobKind.INFER:
        fraction = min(float(knobs.get("gpu_memory_utilization", budget / device_mib) or 0.0), budget / device_mib)
        for name, flag in VLLM_ARGS.items():
            if name == "gpu_memory_utilization":
                args.append(f"{flag}={math.floor(fraction * 1000) / 1000:.3f}")
            elif name in knobs:
                args.append(f"{flag}={knobs[name]}")
        args.append("--enable-prefix-caching" if knobs.get("prefix_caching", False) else "--no-enable-prefix-caching")
    else:
        env[ENV_MEM_FRACTION] = f"{budget / device_mib:.4f}"
        env[ENV_TORCH_ALLOC] = f"max_split_size_mb:{int(budget)}"
        env[ENV_DP] = str(len(placement.gpus))
    if partners:
        env[ENV_MPS_MEM] = f"0={math.floor(budget)}M"
        env[ENV_MPS_THREADS] = str(mps_thread_percentage(placement.resources.sm, busiest_sm))
    return LaunchSettings(tuple(sorted(env.items())), tuple(args))


def plan_launch_settings(plan: Plan, workloads: dict[str, Workload], cluster: Cluster) -> dict[str, LaunchSettings]:
    """Launch settings for every placement of a plan (``workloads`` maps job id -> workload)."""
    by_id = {p.job_id: p for p in plan.placements}
    out = {}
    for p in plan.placements:
        partners = tuple(by_id[q] for q in p.partners if q in by_id)
        out[p.job_id] = launch_settings(p, workloads[p.job_id], cluster, partners)
    return out
