"""The exact reference: one planning instance as a mixed-integer program solved by HiGHS.

Variables: x[j,k,g] = job j runs single-GPU option k on GPU g; for data-parallel options z[j,k]
(chosen) and y[j,k,g] (uses GPU g), with sum_g y = dp x z. Constraints per GPU: memory <= device
less M_sys, SM shares <= capacity, at most ``max_jobs_per_gpu`` jobs; per node: CPU and host memory;
per job: at most one option (exactly one for running jobs). Objective: sum of w_j T_j(c)/T_j(c_max)
(no interference: the MILP measures ESP's allocation quality, not the predictor).

Identical GPUs make the naive model slow (every relabelling of GPUs is another optimum). Where all
GPUs are interchangeable (one model, node constraints that cannot bind), relabel canonically: GPUs
open in order of their lowest job, so job j (in a fixed order) may only use GPU q <= the number of
GPUs jobs 0..j can open.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from elastico_core.model.cluster import Cluster
from elastico_core.pds.options import EpochTable


@dataclass(frozen=True, slots=True)
class MilpResult:
    objective: float  # best solution found
    bound: float  # HiGHS's dual bound (== objective when proven optimal)
    optimal: bool
    seconds: float
    status: str
    choice: dict[int, tuple[int, tuple[int, ...]]]  # job -> (option, GPU indexes)

    @property
    def gap(self) -> float:
        """Relative gap between the best bound and the best solution (0 when proven optimal)."""
        return max(0.0, (self.bound - self.objective) / max(abs(self.bound), 1e-12))


def solve_reference(table: EpochTable, cluster: Cluster, sm_capacity: float = 1.0, time_limit_s: float = 60.0) -> MilpResult:
    t0 = time.perf_counter()
    gpus = cluster.gpus
    models = {m.name: i for i, m in enumerate(cluster.gpu_models())}
    gpu_model = np.array([models[g.model.name] for g in gpus])
    node_of = {n.name: i for i, n in enumerate(cluster.nodes)}
    gpu_node = np.array([node_of[g.node] for g in gpus])
    usable = np.array([cluster.usable_mem_mib(g.model) for g in gpus])
    n_jobs, width = table.valid.shape
    max_dp = np.where(table.valid, table.dp, 1).max(axis=1)

    # GPUs are interchangeable when there is one model and node CPU/host memory cannot bind.
    node_cpu = np.array([n.cpu_cores for n in cluster.nodes])
    node_host = np.array([n.host_mem_mib for n in cluster.nodes])
    per_gpu = np.bincount(gpu_node, minlength=len(cluster.nodes))
    worst_cpu = float(np.where(table.valid, table.cpu, 0).max(initial=0)) * cluster.max_jobs_per_gpu
    worst_host = float(np.where(table.valid, table.host, 0).max(initial=0)) * cluster.max_jobs_per_gpu
    node_binding = bool(np.any(per_gpu * worst_cpu > node_cpu) or np.any(per_gpu * worst_host > node_host))
    symmetric = len(models) == 1 and not node_binding and not table.running.any()
    opened = np.cumsum(max_dp)  # GPUs jobs 0..j can open at most

    cols_obj: list[float] = []
    var_job: list[int] = []
    var_opt: list[int] = []
    var_gpu: list[int] = []  # -1 for z variables
    for j in range(n_jobs):
        for k in range(width):
            if not table.valid[j, k]:
                continue
            m_i, d = int(table.model[j, k]), int(table.dp[j, k])
            allowed = np.flatnonzero(gpu_model == m_i)
            if symmetric:
                allowed = allowed[allowed < opened[j]]
            value = float(table.value[j, k] - table.switch[j, k])
            if d == 1:
                for g in allowed:
                    cols_obj.append(value)
                    var_job.append(j)
                    var_opt.append(k)
                    var_gpu.append(int(g))
            else:
                cols_obj.append(value)  # z
                var_job.append(j)
                var_opt.append(k)
                var_gpu.append(-1)
                for g in allowed:  # y
                    cols_obj.append(0.0)
                    var_job.append(j)
                    var_opt.append(k)
                    var_gpu.append(-2 - int(g))
    n_var = len(cols_obj)
    vj = np.array(var_job)
    vk = np.array(var_opt)
    vg = np.array(var_gpu)
    is_x = vg >= 0
    is_z = vg == -1
    is_y = vg <= -2
    gpu_of = np.where(is_x, vg, np.where(is_y, -2 - vg, -1))
    mem = table.mem[vj, vk]
    sm = table.sm[vj, vk]
    cpu = table.cpu[vj, vk]
    host = table.host[vj, vk]
    dpv = table.dp[vj, vk]

    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0

    def add(idx: np.ndarray, coef: np.ndarray, lower: float, upper: float) -> None:
        nonlocal r
        rows.extend([r] * len(idx))
        cols.extend(idx.tolist())
        vals.extend(coef.tolist())
        lo.append(lower)
        hi.append(upper)
        r += 1

    choose = np.flatnonzero(is_x | is_z)
    for j in range(n_jobs):
        idx = choose[vj[choose] == j]
        if len(idx):
            add(idx, np.ones(len(idx)), 1.0 if table.running[j] else 0.0, 1.0)
    # gang linking: sum_g y[j,k,g] - dp z[j,k] = 0
    for zi in np.flatnonzero(is_z):
        ys = np.flatnonzero(is_y & (vj == vj[zi]) & (vk == vk[zi]))
        add(np.append(ys, zi), np.append(np.ones(len(ys)), -float(dpv[zi])), 0.0, 0.0)
    on = is_x | is_y
    for gi in range(len(gpus)):
        idx = np.flatnonzero(on & (gpu_of == gi))
        if not len(idx):
            continue
        add(idx, mem[idx], -np.inf, float(usable[gi]))
        add(idx, sm[idx], -np.inf, sm_capacity)
        add(idx, np.ones(len(idx)), -np.inf, float(cluster.max_jobs_per_gpu))
    if node_binding:
        for n in range(len(cluster.nodes)):
            idx = np.flatnonzero(on & (gpu_node[np.maximum(gpu_of, 0)] == n) & (gpu_of >= 0))
            if len(idx):
                add(idx, cpu[idx], -np.inf, float(node_cpu[n]))
                add(idx, host[idx], -np.inf, float(node_host[n]))

    if n_var == 0:
        return MilpResult(0.0, 0.0, True, time.perf_counter() - t0, "empty", {})
    a = sparse.csr_array((vals, (rows, cols)), shape=(r, n_var))
    res = milp(
        c=-np.array(cols_obj),
        integrality=np.ones(n_var),
        bounds=Bounds(0, 1),
        constraints=LinearConstraint(a, np.array(lo), np.array(hi)),
        options={"time_limit": time_limit_s, "disp": False, "mip_rel_gap": 1e-6},
    )
    seconds = time.perf_counter() - t0
    if res.x is None:
        return MilpResult(0.0, float("inf"), False, seconds, str(res.message), {})
    x = np.round(res.x).astype(bool)
    choice: dict[int, tuple[int, tuple[int, ...]]] = {}
    for i in np.flatnonzero(x & (is_x | is_z)):
        j, k = int(vj[i]), int(vk[i])
        if is_x[i]:
            choice[j] = (k, (int(vg[i]),))
        else:
            ys = np.flatnonzero(x & is_y & (vj == j) & (vk == k))
            choice[j] = (k, tuple(int(-2 - vg[y]) for y in ys))
    objective = -float(res.fun)
    bound = -float(getattr(res, "mip_dual_bound", res.fun) or res.fun)
    optimal = res.status == 0
    return MilpResult(objective, bound if not optimal else objective, optimal, seconds, str(res.message), choice)
