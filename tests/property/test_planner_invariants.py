"""For random clusters, jobs, running states and predictors, a plan never breaks the planner's promises:

* no GPU's memory (less M_sys), SM share or job count is exceeded, no node's CPU or host memory;
* every job is placed or queued with a reason, exactly once, never dropped;
* every placed job meets its floor under the predicted slowdown;
* prices are never negative.
"""

from __future__ import annotations

import math
from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

from elastico_core.iac.predictor import NoInterference, TableLookup
from elastico_core.iac.table6 import table6_predictor
from elastico_core.model import Assignment, Cluster, JobSpec, Node, gpu_model, narrow_space
from elastico_core.model.plan import QueueCode
from elastico_core.model.workload import JobKind
from elastico_core.pds.planner import Planner, PlanningInput
from elastico_core.pds.rules import PRODUCTION, VARIANTS, ElasticoRules
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.store import ProfileStore
from tests.conftest import REPO

STORE = ProfileStore.open(REPO / "profiles")
NAMES = sorted(PAPER_WORKLOADS)
MODELS = ["a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb"]


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    n_nodes = draw(st.integers(1, 3))
    nodes = []
    for i in range(n_nodes):
        model = gpu_model(draw(st.sampled_from(MODELS)))
        nodes.append(Node(f"n{i}", model, draw(st.integers(1, 4)), draw(st.sampled_from([8.0, 32.0, 128.0])), 1024.0 * draw(st.sampled_from([64, 512]))))
    return Cluster("c", tuple(nodes), m_sys_mib=draw(st.sampled_from([0, 512, 2048])),
                   max_jobs_per_gpu=draw(st.sampled_from([1, 2, 2, 3])))


@st.composite
def jobs(draw: st.DrawFn) -> tuple[JobSpec, ...]:
    out = []
    for i in range(draw(st.integers(1, 14))):
        w = PAPER_WORKLOADS[draw(st.sampled_from(NAMES))]
        dp = draw(st.sampled_from([1, 1, 2, 4])) if w.kind is JobKind.TRAIN else 1
        floor_frac = draw(st.sampled_from([0.0, 0.0, 0.3, 0.7, 2.0]))  # 2.0: no configuration reaches it
        best = 3000.0 if w.kind is JobKind.TRAIN else 300.0
        out.append(JobSpec(f"j{i}", w, narrow_space(w, {}, dp), floor=floor_frac * best * 0.1,
                           weight=draw(st.sampled_from([1.0, 2.0, 3.0])), max_gpus=dp, submit_time_s=float(i),
                           work=draw(st.sampled_from([math.inf, 1e3, 1e6, 1e9]))))  # sized weights (pds.job_size)
    return tuple(out)


def predictors() -> st.SearchStrategy[object]:
    pairs = st.dictionaries(st.tuples(st.sampled_from(NAMES), st.sampled_from(NAMES)), st.floats(1.0, 3.0), max_size=30)
    return st.one_of(st.just(table6_predictor()), st.just(NoInterference()), pairs.map(lambda t: TableLookup(table=t, default=1.1)))


# the production rules most of the time; the opt-in local search, no memory margin, an eager outbid margin, one round and
# none keep the same promises
RULES = st.sampled_from([PRODUCTION, PRODUCTION, VARIANTS["local-search"], VARIANTS["margin-0"], VARIANTS["preempt-0"], VARIANTS["no-preempt"],
                        VARIANTS["one-round"]])  # one round: the split (and its re-assessment) runs most often


def check(plan, inp: PlanningInput) -> None:  # type: ignore[no-untyped-def]
    cluster = inp.cluster
    gpus = {g.id: g for g in cluster.gpus}
    mem: dict[str, float] = defaultdict(float)
    sm: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    cpu: dict[str, float] = defaultdict(float)
    host: dict[str, float] = defaultdict(float)
    for p in plan.placements:
        assert len(set(p.gpus)) == len(p.gpus) == int(p.knobs.get("dp", 1) or 1)
        for g in p.gpus:
            mem[g] += p.resources.gpu_mem_mib
            sm[g] += p.resources.sm
            count[g] += 1
            cpu[gpus[g].node] += p.resources.cpu_cores
            host[gpus[g].node] += p.resources.host_mem_mib
        assert p.throughput / p.predicted_slowdown >= p.floor - 1e-6, p
        assert p.predicted_slowdown >= 1.0
    for g, used in mem.items():
        assert used <= cluster.usable_mem_mib(gpus[g].model) + 1e-6, (g, used)
        assert sm[g] <= 1.0 + 1e-6 and count[g] <= cluster.max_jobs_per_gpu
    for node in cluster.nodes:
        assert cpu[node.name] <= node.cpu_cores + 1e-6 and host[node.name] <= node.host_mem_mib + 1e-6
    placed = [p.job_id for p in plan.placements]
    queued = [q.job_id for q in plan.queued]
    assert len(placed) == len(set(placed)) and not set(placed) & set(queued)
    assert placed == sorted(placed), "placements come in job-id order"
    assert sorted(placed + queued) == sorted(j.id for j in inp.jobs)
    assert all(q.reason for q in plan.queued)
    assert all(q.shortfall is not None for q in plan.queued), "every queued job says what it lacks"
    assert all(v >= 0 for _, v in plan.prices.items)
    assert {a.job_id for a in plan.actions} == {j.id for j in inp.jobs}


@given(clusters(), jobs(), predictors(), RULES, st.booleans(), st.integers(0, 10**6))
def test_plans_keep_every_promise(  # type: ignore[no-untyped-def]
    real: Cluster, specs: tuple[JobSpec, ...], predictor, rules: ElasticoRules, replan: bool, seed: int
) -> None:
    planner = Planner(STORE, predictor, rules.planner)  # type: ignore[arg-type]
    cluster = rules.planning_cluster(real)  # what the controller plans on: each GPU less the rules' margin
    inp = PlanningInput(cluster, specs)
    plan = planner.plan(inp)
    check(plan, inp)
    if replan:  # the next epoch: what runs now is the first plan, minus one job, plus prices
        running = {p.job_id: Assignment(p.job_id, p.knobs, p.gpus) for p in plan.placements}
        keep = tuple(j for k, j in enumerate(specs) if k != seed % len(specs))
        running = {k: v for k, v in running.items() if k in {j.id for j in keep}}
        inp2 = PlanningInput(cluster, keep, running=running, prices=plan.prices,
                             waiting=frozenset(q.job_id for q in plan.queued))
        plan2 = planner.plan(inp2)
        check(plan2, inp2)
        # a running job is never silently dropped: it stays placed or is preempted with a reason
        for jid in running:
            assert plan2.placement(jid) is not None or any(q.job_id == jid and q.reason for q in plan2.queued)
        # a job outbid (``preempt_outbid``) was stopped for room another job took: never for nothing
        for q in plan2.queued:
            if q.code is QueueCode.OUTBID:
                was = set(running[q.job_id].gpus)
                assert any(set(p.gpus) & was and not set(running[p.job_id].gpus if p.job_id in running else ()) & was
                           for p in plan2.placements), q
