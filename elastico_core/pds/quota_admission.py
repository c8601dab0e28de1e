"""At submit: a job its queue could never admit (one line, exit 2, nothing registered)."""

from __future__ import annotations

from collections.abc import Mapping

from elastico_core.model.cluster import Cluster
from elastico_core.model.job import JobSpec, gang_size
from elastico_core.model.knobs import cartesian
from elastico_core.model.queues import GIB, charge
from elastico_core.pds.quotas import TOL
from elastico_core.rst.estimators import estimate


def queue_problem(cluster: Cluster, job: JobSpec, least: Mapping[str, tuple[float, float]] | None = None) -> str | None:
    """Why ``job`` can never be admitted by its queue on ``cluster`` (one line), or None.

    A queue the cluster lacks, or a job whose smallest configuration (``least``: per GPU model its least
    GPUs and GiB charge, ``smallest_charges`` when not given) exceeds its queue's nominal quota plus its
    borrowing limit on every GPU model. A job no GPU can hold at all is left to the planner
    (``no-feasible-config``).
    """
    queues = cluster.queues
    if not queues:
        return None
    spec = queues.get(job.queue)
    if spec is None:
        return f"queue {job.queue!r} is not a queue of cluster {cluster.name!r} (queues: {', '.join(queues.names)})"
    least = smallest_charges(cluster, job) if least is None else least
    if not least:
        return None
    worst: str | None = None
    for model, (gpus, gib) in least.items():
        nominal, borrow = spec.nominal_of(model), spec.borrowing_of(model)
        if gpus <= nominal.gpus + borrow.gpus + TOL and gib <= nominal.memory_gib + borrow.memory_gib + TOL:
            return None
        limit = f"nominal quota {nominal.gpus:g} plus borrowing limit {borrow.gpus:g} GPUs"
        if gpus <= nominal.gpus + borrow.gpus + TOL:
            limit = f"nominal quota {nominal.memory_gib:g} plus borrowing limit {borrow.memory_gib:g} GiB of GPU memory"
        worst = worst or (f"queue {spec.name}: its smallest configuration is charged {gpus:.2f} GPUs ({gib:.1f} GiB) of {model}, "
                          f"more than the queue's {limit}")
    return worst


def smallest_charges(cluster: Cluster, job: JobSpec) -> dict[str, tuple[float, float]]:
    """Per GPU model of ``cluster``: the least charge (GPUs, GiB of GPU memory) of any configuration of the job
    that fits one of its GPUs, by the estimators (what the planner uses before anything is measured)."""
    out: dict[str, tuple[float, float]] = {}
    for model in cluster.gpu_models():
        usable = cluster.usable_mem_mib(model)
        best: tuple[float, float] | None = None
        for knobs in cartesian(job.knob_space):
            p = estimate(job.workload, knobs, model)
            if p is None or p.resources.gpu_mem_mib > usable:
                continue
            dp = gang_size(knobs)
            c = (charge(dp, p.resources.sm, p.resources.gpu_mem_mib, usable, 1.0, cluster.max_jobs_per_gpu),
                 dp * p.resources.gpu_mem_mib / GIB)
            best = c if best is None or c < best else best
        if best is not None:
            out[model.name] = best
    return out
