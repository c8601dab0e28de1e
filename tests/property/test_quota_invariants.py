"""For random queues, jobs and arrivals over several epochs, plans keep the quotas' promises:

* no plan puts a queue above its nominal quota plus its borrowing limit (GPUs and GPU memory);
* no cohort uses more beyond its nominal quotas than its queues may lend (their lending limits, of what
  they do not use) plus the capacity no queue names: nothing is lent beyond a lending limit;
* every job is placed or queued, never dropped;
* a queue at or under its nominal quota with pending work that fits in it gets it within
  ``reclaim_epochs`` epochs while another queue holds lent quota (single-GPU jobs, no interference model:
  a gang may also need whole nodes). With nothing lent there is nothing to give back: a queue's own jobs
  may leave its share in fragments no waiting job fits (charges are fractions of a GPU), which is
  packing, not quota.
"""

from __future__ import annotations

from types import MappingProxyType

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastico_core.model import Assignment, Cluster, JobSpec, Node, gpu_model
from elastico_core.model.job import gang_size
from elastico_core.model.plan import Plan
from elastico_core.model.queues import Amount, QueueSet, QueueSpec, charge
from elastico_core.model.workload import JobKind
from elastico_core.pds.planner import Planner, PlanningInput
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.store import ProfileStore
from tests.conftest import REPO

STORE = ProfileStore.open(REPO / "profiles")
SINGLE = sorted(n for n, w in PAPER_WORKLOADS.items() if w.kind is JobKind.TRAIN or n.startswith("qwen"))
MODEL = gpu_model("a100-40gb")
TOL = 1e-6


@st.composite
def setups(draw: st.DrawFn) -> tuple[Cluster, tuple[JobSpec, ...], tuple[JobSpec, ...]]:
    nodes = tuple(Node(f"n{i}", MODEL, draw(st.integers(2, 4)), 64.0, 512 * 1024.0) for i in range(draw(st.integers(1, 2))))
    total = sum(n.gpu_count for n in nodes)
    n_q = draw(st.integers(2, 3))
    cuts = sorted(draw(st.lists(st.integers(0, total), min_size=n_q - 1, max_size=n_q - 1)))
    shares = [b - a for a, b in zip([0, *cuts], [*cuts, draw(st.integers(cuts[-1], total))], strict=True)]
    usable_gib = (MODEL.memory_mib - 512) / 1024
    queues = []
    for i, gpus in enumerate(shares):
        lend = draw(st.sampled_from([None, 0, gpus]))
        borrow = draw(st.sampled_from([None, 0, 1, 2]))
        queues.append(QueueSpec(
            f"q{i}", (("a100-40gb", Amount(float(gpus), gpus * usable_gib)),), cohort="org", weight=draw(st.sampled_from([1.0, 2.0])),
            borrowing_limit=() if borrow is None else (("a100-40gb", Amount(float(borrow), float("inf"))),),
            lending_limit=() if lend is None else (("a100-40gb", Amount(float(lend), lend * usable_gib)),),
        ))
    cluster = Cluster("c", nodes, queues=QueueSet(tuple(queues), draw(st.integers(1, 3))))

    def jobs(prefix: str, queue: str, n: int, t0: float) -> tuple[JobSpec, ...]:
        return tuple(JobSpec(f"{prefix}{i}", PAPER_WORKLOADS[draw(st.sampled_from(SINGLE))], floor=0.0,
                             weight=draw(st.sampled_from([1.0, 2.0])), queue=queue, submit_time_s=t0 + i,
                             priority=draw(st.sampled_from([0, 0, 1]))) for i in range(n))

    first = jobs("a", "q0", draw(st.integers(2, 3 * total)), 0.0)
    others = tuple(j for i in range(1, n_q) for j in jobs(f"q{i}-", f"q{i}", draw(st.integers(0, total)), 100.0 * i))
    return cluster, first, others


def _usage(plan: Plan, cluster: Cluster, jobs: tuple[JobSpec, ...]) -> dict[str, tuple[float, float]]:
    usable = cluster.usable_mem_mib(MODEL)
    out: dict[str, tuple[float, float]] = {}
    queue_of = {j.id: j.queue for j in jobs}
    for p in plan.placements:
        g = charge(len(p.gpus), p.resources.sm, p.resources.gpu_mem_mib, usable, 1.0, cluster.max_jobs_per_gpu)
        m = len(p.gpus) * p.resources.gpu_mem_mib / usable
        a, b = out.get(queue_of[p.job_id], (0.0, 0.0))
        out[queue_of[p.job_id]] = (a + g, b + m)
    return out


def check(plan: Plan, cluster: Cluster, jobs: tuple[JobSpec, ...]) -> dict[str, tuple[float, float]]:
    ids = [p.job_id for p in plan.placements] + [q.job_id for q in plan.queued]
    assert sorted(ids) == sorted(j.id for j in jobs)
    use = _usage(plan, cluster, jobs)
    lendable = over = 0.0  # the cohort's use beyond nominal quotas, what its queues may lend of what they do not use
    pool = len(cluster.gpus) - sum(q.nominal_of("a100-40gb").gpus for q in cluster.queues.queues)
    for q in cluster.queues.queues:
        u = use.get(q.name, (0.0, 0.0))
        nominal, borrow, lend = q.nominal_of("a100-40gb"), q.borrowing_of("a100-40gb"), q.lending_of("a100-40gb")
        assert u[0] <= nominal.gpus + borrow.gpus + TOL, (q.name, u, nominal, borrow)
        assert u[1] <= (nominal.memory_gib + borrow.memory_gib) * 1024 / cluster.usable_mem_mib(MODEL) + TOL
        over += max(0.0, u[0] - nominal.gpus)
        lendable += min(lend.gpus, max(0.0, nominal.gpus - u[0]))
    assert over <= lendable + pool + TOL, (over, lendable, pool)
    return use


def step(planner: Planner, cluster: Cluster, jobs: tuple[JobSpec, ...], plan: Plan | None) -> Plan:
    running = {p.job_id: Assignment(p.job_id, p.knobs, p.gpus) for p in plan.placements} if plan else {}
    return planner.plan(PlanningInput(cluster, jobs, running=MappingProxyType(running), prices=plan.prices if plan else None,
                                      owed=MappingProxyType(dict(plan.owed) if plan else {})))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(setups())
def test_quotas_hold_and_lent_quota_comes_back(setup: tuple[Cluster, tuple[JobSpec, ...], tuple[JobSpec, ...]]) -> None:
    cluster, first, others = setup
    planner = Planner(STORE)
    plan = None
    for _ in range(2):  # queue q0 alone: it borrows what the others do not use
        plan = step(planner, cluster, first, plan)
        check(plan, cluster, first)
    jobs = first + others
    deadline = cluster.queues.reclaim_epochs
    for _ in range(deadline):
        assert plan is not None
        plan = step(planner, cluster, jobs, plan)
        use = check(plan, cluster, jobs)
    assert plan is not None
    # after the deadline, no queue at or under its nominal quota waits for a job that fits in it while
    # another queue holds quota lent to it
    lent = any(use.get(q.name, (0.0, 0.0))[0] > q.nominal_of("a100-40gb").gpus + TOL for q in cluster.queues.queues)
    if not lent:
        return
    placed = {p.job_id for p in plan.placements}
    by_id = {j.id: j for j in jobs}
    least = _least_charges(planner, cluster, jobs)
    for q in cluster.queues.queues:
        held = use.get(q.name, (0.0, 0.0))[0]
        nominal = q.nominal_of("a100-40gb").gpus
        for jid, c in least.items():
            if by_id[jid].queue == q.name and jid not in placed and held + c <= nominal - TOL:
                raise AssertionError(f"{q.name} holds {held:.2f} of nominal {nominal:g}; {jid} ({c:.2f}) still waits "
                                     f"after {deadline} epochs: {next(x for x in plan.queued if x.job_id == jid)}")


def _least_charges(planner: Planner, cluster: Cluster, jobs: tuple[JobSpec, ...]) -> dict[str, float]:
    compiler = planner.compiler(cluster)
    usable = cluster.usable_mem_mib(MODEL)
    out = {}
    for j in jobs:
        opts = compiler.options(j)
        if opts.problem is not None:
            continue
        out[j.id] = min(charge(gang_size(k), p.resources.sm, p.resources.gpu_mem_mib, usable, 1.0, cluster.max_jobs_per_gpu)
                        for k, p in zip(opts.knobs, opts.profiles, strict=True))
    return out
