"""Queues in planning: the cluster file's queues, fair shares, quota-priced plans, reclaim with reasons."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from types import MappingProxyType

import numpy as np
import pytest

from elastico_core.bench.instances import make_cluster, random_jobs
from elastico_core.iac.predictor import NoInterference
from elastico_core.model import Assignment, JobSpec, QueueCode
from elastico_core.model.errors import SpecError
from elastico_core.model.plan import ActionKind, Binding, Plan
from elastico_core.model.queues import Amount, QueueSet, QueueSpec, charge
from elastico_core.pds.job_size import SizeWeights
from elastico_core.pds.planner import Planner, PlannerConfig, PlanningInput
from elastico_core.pds.quotas import QuotaLayout, entitlements, fair_share
from elastico_core.rst.catalog import PAPER_WORKLOADS as W
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.truth import PredictorKind, make_predictor
from elastico_core.specs.files import parse_cluster

NODES = "  nodes:\n    - {name: n, count: 1, gpu: a100-40gb, gpus: 4}\n"


def cluster(queues: str, nodes: str = NODES, extra: str = "") -> object:
    return parse_cluster(f"cluster:\n  name: q\n{nodes}{extra}  queues:\n{queues}", "cluster.yaml")


TWO_TEAMS = (
    "    - {name: team-a, cohort: org, nominal_quota: {gpus: 2}}\n"
    "    - {name: team-b, cohort: org, nominal_quota: {gpus: 2}}\n"
)


# ---- the cluster file ---------------------------------------------------------------------------------
def test_queues_parse_with_kueue_vocabulary() -> None:
    c = cluster(
        "    - name: ml-research\n      cohort: org\n      weight: 2\n"
        "      nominal_quota: {a100-40gb: {gpus: 2, gpu_memory_gib: 60}}\n"
        "      borrowing_limit: {gpus: 1}\n      lending_limit: {gpus: 1}\n"
        "    - {name: serving, nominal_quota: {gpus: 2}}\n",
        extra="  reclaim_epochs: 4\n",
    )
    qs = c.queues  # type: ignore[attr-defined]
    assert qs.reclaim_epochs == 4 and qs.names == ("ml-research", "serving")
    ml = qs.get("ml-research")
    assert ml.weight == 2 and ml.nominal_of("a100-40gb") == Amount(2.0, 60.0)
    assert ml.borrowing_of("a100-40gb").gpus == 1 and ml.borrowing_of("a100-40gb").memory_gib == float("inf")
    assert ml.lending_of("a100-40gb") == Amount(1.0, 30.0)  # lends the memory of the GPUs it lends
    serving = qs.get("serving")
    # a nominal quota without memory holds its GPUs' whole memory (less M_sys); no cohort: no lending or borrowing
    assert serving.nominal_of("a100-40gb").memory_gib == pytest.approx(2 * (40960 - 512) / 1024)
    assert serving.borrowing_of("a100-40gb") == Amount(0.0, 0.0) == serving.lending_of("a100-40gb")


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ("    - {name: a, nominal_quota: {gpus: 3}}\n    - {name: b, nominal_quota: {gpus: 2}}\n",
         "nominal quotas of a100-40gb add up to 5 GPUs; the cluster has 4"),
        ("    - {name: a, nominal_quota: {h100-80gb: {gpus: 1}}}\n", "GPU model 'h100-80gb' is not in the cluster"),
        ("    - {name: a, cohort: org, nominal_quota: {gpus: 1}, lending_limit: {gpus: 2}}\n", "lends more than its nominal quota"),
        ("    - {name: a, nominal_quota: {gpus: 1}, borrowing_limit: {gpus: 2}}\n", "queue 'a': borrowing_limit: needs a cohort"),
        ("    - {name: a, nominal_quota: {gpus: 1}, lending_limit: {gpus: 1}}\n", "queue 'a': lending_limit: needs a cohort"),
        ("    - {name: Team_A, nominal_quota: {gpus: 1}}\n", "queue 'Team_A': name: 'Team_A' is not a DNS label"),
        ("    - {name: a, nominal_quota: {gpus: 1}}\n    - {name: a, nominal_quota: {gpus: 1}}\n", "duplicate queue names ['a']"),
        ("    - {name: a, nominal_quota: {gpus: -1}}\n", "nominal_quota.a100-40gb.gpus"),
        ("    - {name: a, nominal_quota: {gpu: 1}}\n", "'gpu' is neither a GPU model"),
        ("    - {name: a, weight: 0, nominal_quota: {gpus: 1}}\n", "weight"),
        ("    - {name: a, nominal_quota: {gpus: 1, gpu_memory_gib: 500}}\n", "add up to 500 GiB of GPU memory"),
    ],
    ids=["above-cluster", "unknown-model", "lend-above-nominal", "borrow-without-cohort", "lend-without-cohort", "bad-name", "duplicate", "negative", "typo", "weight", "memory"],
)
def test_bad_queues_are_one_line_errors(queues: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        cluster(queues)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_two_models_need_the_model_named() -> None:
    nodes = "  nodes:\n    - {name: a, gpu: a100-40gb, gpus: 2}\n    - {name: h, gpu: h100-80gb, gpus: 2}\n"
    with pytest.raises(SpecError, match="several GPU models"):
        cluster("    - {name: a, nominal_quota: {gpus: 1}}\n", nodes)
    c = cluster("    - {name: a, nominal_quota: {a100-40gb: {gpus: 1}, h100: {gpus: 2}}}\n", nodes)
    assert c.queues.get("a").nominal_of("h100-80gb").gpus == 2  # type: ignore[attr-defined]


# ---- the arithmetic ----------------------------------------------------------------------------------
def test_charge_is_the_largest_share_of_a_gpu_and_at_least_a_slot() -> None:
    assert charge(1, 0.3, 10000, 40000, 1.0, 2) == 0.5  # a small job still takes one of two slots
    assert charge(2, 0.9, 10000, 40000, 1.0, 2) == pytest.approx(1.8)  # SM-bound, on two GPUs
    assert charge(1, 0.2, 30000, 40000, 1.0, 2) == pytest.approx(0.75)  # memory-bound
    assert charge(1, 0.9, 10000, 40000, float("inf"), 2) == 0.5  # time-sliced packing: SM share is free


def test_fair_share_follows_weights_and_never_exceeds_the_pool() -> None:
    pool = np.array([4.0, 4.0])
    want = np.array([[4.0, 2.0], [4.0, 2.0]])
    even = fair_share(want, pool, np.array([1.0, 1.0]))
    assert even[:, 0] == pytest.approx([2.0, 2.0])
    skew = fair_share(want, pool, np.array([3.0, 1.0]))
    assert skew[:, 0] == pytest.approx([3.0, 1.0])
    small = fair_share(np.array([[1.0, 0.5], [8.0, 4.0]]), pool, np.array([1.0, 1.0]))
    assert small[0, 0] == pytest.approx(1.0) and small[1, 0] == pytest.approx(3.0)  # what one leaves, the other gets
    # dominant resource: a memory-heavy claimant is held back by memory
    drf = fair_share(np.array([[4.0, 4.0], [1.0, 0.1]]), np.array([4.0, 4.0]), np.array([1.0, 1.0]))
    assert (drf.sum(axis=0) <= pool + 1e-9).all() and drf[1, 0] == pytest.approx(1.0)
    assert fair_share(np.array([[1.0, 1.0]]), np.array([0.0, 4.0]), np.array([1.0]))[0, 0] == 0.0  # Leontief


def test_entitlements_respect_lending_and_borrowing_limits() -> None:
    c = cluster(
        "    - {name: a, cohort: org, nominal_quota: {gpus: 1}, borrowing_limit: {gpus: 1}}\n"
        "    - {name: b, cohort: org, nominal_quota: {gpus: 2}, lending_limit: {gpus: 1}}\n"
        "    - {name: c, cohort: org, nominal_quota: {gpus: 1}}\n"
    )
    planner = Planner(ProfileStore.open("profiles"))
    planner.compiler(c)  # type: ignore[arg-type]
    lay = QuotaLayout.of(c, planner.caches.layout)  # type: ignore[arg-type]
    demand = np.zeros((3, 1, 2))
    demand[0, 0] = (4.0, 4.0)  # a wants 4, b and c nothing
    ent = entitlements(lay, np.zeros_like(demand), demand)
    assert ent.borrowed[0, 0, 0] == pytest.approx(1.0)  # its borrowing limit
    assert ent.lent[1, 0, 0] <= 1.0 + 1e-9  # b lends at most its lending limit
    assert ent.cap[0, 0, 0] == pytest.approx(2.0)
    assert (ent.cap.sum(axis=0) <= 4.0 + 1e-9).all()


# ---- planning --------------------------------------------------------------------------------------
def _jobs(queue: str, n: int, workload: str = "resnet50", t0: float = 0.0) -> tuple[JobSpec, ...]:
    return tuple(JobSpec(f"{queue[-1]}{i}", W[workload], floor=50.0, queue=queue, submit_time_s=t0 + i) for i in range(n))


def _run(planner: Planner, c: object, jobs: tuple[JobSpec, ...], plan: Plan | None = None) -> Plan:
    running = {p.job_id: Assignment(p.job_id, p.knobs, p.gpus) for p in plan.placements} if plan else {}
    owed = plan.owed if plan else {}
    return planner.plan(PlanningInput(c, jobs, running=MappingProxyType(running), prices=plan.prices if plan else None,  # type: ignore[arg-type]
                                      owed=MappingProxyType(dict(owed))))


def _held(plan: Plan, name: str) -> float:
    return next(s.used_gpus for s in plan.queues if s.name == name)


def test_an_idle_queue_lends_and_gets_its_quota_back_within_the_deadline(store: ProfileStore) -> None:
    """Team B's quota is lent to team A's jobs; B submits; B is admitted within reclaim_epochs; A's jobs are
    reshaped or requeued (none lost), and the requeued say by whom and why."""
    c = cluster(TWO_TEAMS, extra="  reclaim_epochs: 3\n")
    planner = Planner(store)
    a = _jobs("team-a", 6)
    plan = _run(planner, c, a)
    assert len(plan.placements) == 6 and _held(plan, "team-a") > 2.0  # borrows B's idle quota
    b = _jobs("team-b", 3, "bert", t0=100.0)
    admitted_at = None
    for epoch in range(1, 4):
        plan = _run(planner, c, a + b, plan)
        placed = {p.job_id for p in plan.placements}
        assert placed | {q.job_id for q in plan.queued} == {j.id for j in a + b}  # none lost
        if admitted_at is None and {j.id for j in b} <= placed:
            admitted_at = epoch
    assert admitted_at is not None and admitted_at <= 3
    assert _held(plan, "team-b") <= 2.0 + 1e-9 and _held(plan, "team-a") <= 2.0 + 1e-9
    reclaimed = [q for q in plan.queued if q.code is QueueCode.RECLAIMED or q.code is QueueCode.QUOTA]
    assert all(q.job_id.startswith("a") for q in reclaimed)


def test_reclaimed_jobs_are_preempted_with_who_and_why(store: ProfileStore) -> None:
    c = cluster(TWO_TEAMS, extra="  reclaim_epochs: 2\n")
    planner = Planner(store)
    a = _jobs("team-a", 6)
    plan = _run(planner, c, a)
    b = _jobs("team-b", 3, "bert", t0=100.0)
    first = _run(planner, c, a + b, plan)
    owed = dict(first.owed)
    assert owed and all(n == 1 for n in owed.values())
    held = next(q for q in first.queued if q.job_id in owed)
    assert held.code is QueueCode.QUOTA and "lent to team-a" in held.reason and "epoch 1 of 2" in held.reason
    second = _run(planner, c, a + b, first)
    preempted = [x for x in second.actions if x.kind is ActionKind.PREEMPT]
    assert preempted and all("reclaimed by queue team-b" in x.reason for x in preempted)
    assert {q.code for q in second.queued if q.job_id in {x.job_id for x in preempted}} == {QueueCode.RECLAIMED}
    assert set(owed) <= {p.job_id for p in second.placements}


def test_quota_reason_in_kueues_precision(store: ProfileStore) -> None:
    c = cluster(
        "    - {name: ml-research, cohort: org, nominal_quota: {gpus: 1}, borrowing_limit: {gpus: 0}}\n"
        "    - {name: other, cohort: org, nominal_quota: {gpus: 3}}\n"
    )
    plan = Planner(store).plan(PlanningInput(c, _jobs("ml-research", 4)))  # type: ignore[arg-type]
    waiting = [q for q in plan.queued if q.code is QueueCode.QUOTA]
    assert waiting
    q = waiting[0]
    assert q.reason.startswith("queue ml-research: needs ") and "free of nominal 1" in q.reason
    assert q.reason.endswith("borrowing limit 0 reached")
    assert q.shortfall is not None and q.shortfall.resource is Binding.QUOTA and q.shortfall.where == "queue ml-research"
    assert q.shortfall.free < q.shortfall.need
    assert _held(plan, "ml-research") <= 1.0 + 1e-9


MIXED = "  nodes:\n    - {name: a, gpu: a100-40gb, gpus: 2}\n    - {name: h, gpu: h100-80gb, gpus: 2}\n"


def test_on_several_gpu_models_the_quota_reason_names_each_model_it_could_run_on(store: ProfileStore) -> None:
    """A job waits for quota only when no model has room for it, and its reason says why on every model."""
    c = cluster(
        "    - {name: ml, cohort: org, nominal_quota: {a100-40gb: {gpus: 1}}, borrowing_limit: {a100-40gb: {gpus: 0}, h100-80gb: {gpus: 0}}}\n"
        "    - {name: other, cohort: org, nominal_quota: {a100-40gb: {gpus: 1}, h100-80gb: {gpus: 2}}}\n",
        MIXED,
    )
    plan = Planner(store).plan(PlanningInput(c, _jobs("ml", 4)))  # type: ignore[arg-type]
    waiting = [q for q in plan.queued if q.code is QueueCode.QUOTA]
    assert waiting and all(q.reason.startswith("queue ml: needs ") for q in waiting)
    reason = waiting[0].reason
    assert "of a100-40gb" in reason and "of h100-80gb" in reason and reason.count("borrowing limit 0 reached") == 2
    # with H100 quota the same jobs are not held by the quota on the A100s: they run on the H100s
    roomy = cluster(
        "    - {name: ml, cohort: org, nominal_quota: {a100-40gb: {gpus: 1}, h100-80gb: {gpus: 2}}, borrowing_limit: {a100-40gb: {gpus: 0}}}\n"
        "    - {name: other, cohort: org, nominal_quota: {a100-40gb: {gpus: 1}}}\n",
        MIXED,
    )
    plan = Planner(store).plan(PlanningInput(roomy, _jobs("ml", 2)))  # type: ignore[arg-type]
    assert not [q for q in plan.queued if q.code is QueueCode.QUOTA] and len(plan.placements) == 2


def test_a_job_of_an_unknown_queue_waits_saying_so(store: ProfileStore) -> None:
    plan = Planner(store).plan(PlanningInput(cluster(TWO_TEAMS), _jobs("team-x", 1)))  # type: ignore[arg-type]
    assert not plan.placements and plan.queued[0].code is QueueCode.QUOTA
    assert "queue 'team-x' is not a queue of this cluster (queues: team-a, team-b)" in plan.queued[0].reason


def test_quota_goods_are_priced(store: ProfileStore) -> None:
    c = cluster(
        "    - {name: team-a, cohort: org, nominal_quota: {gpus: 1}, borrowing_limit: {gpus: 0}}\n"
        "    - {name: team-b, cohort: org, nominal_quota: {gpus: 3}}\n"
    )
    plan = Planner(store).plan(PlanningInput(c, _jobs("team-a", 4)))  # type: ignore[arg-type]
    prices = plan.prices.as_dict()
    assert "queue:team-a:a100-40gb:gpus" in prices and "queue:team-b:a100-40gb:mem" in prices
    assert prices["queue:team-a:a100-40gb:gpus"] > 0 and prices["queue:team-b:a100-40gb:gpus"] == 0.0
    assert next(s for s in plan.queues if s.name == "team-a").price > 0


# ---- no queues: planning is exactly as before ---------------------------------------------------------
def _fingerprint(store: ProfileStore, config: PlannerConfig | None = None) -> str:
    """Six churned epochs of random instances (NoInterference and the contention model): placements, queue
    codes and reasons, actions and prices, digested."""
    h = hashlib.sha256()
    for n_jobs, gpus, seed in ((30, 16, 0), (60, 32, 1)):
        for pk in ("none", "contention"):
            pred = NoInterference() if pk == "none" else make_predictor(PredictorKind(pk))
            planner = Planner(store, pred, config)
            cl = make_cluster(gpus)
            jobs = list(random_jobs(n_jobs, seed))
            running: dict[str, Assignment] = {}
            prices, waiting = None, frozenset[str]()
            for _ in range(6):
                plan = planner.plan(PlanningInput(cl, tuple(jobs), running=MappingProxyType(running), prices=prices, waiting=waiting))
                h.update(repr([(p.job_id, p.knobs, p.gpus, p.predicted_slowdown, p.partners) for p in plan.placements]).encode())
                h.update(repr([(q.job_id, q.code, q.reason) for q in plan.queued]).encode())
                h.update(repr([(a.kind, a.job_id, a.reason) for a in plan.actions]).encode())
                h.update(repr(plan.prices).encode())
                running = {p.job_id: Assignment(p.job_id, p.knobs, p.gpus) for p in plan.placements}
                prices = plan.prices
                waiting = frozenset(q.job_id for q in plan.queued)
                done = {p.job_id for p in plan.placements[: max(1, len(plan.placements) // 10)]}
                jobs = [j for j in jobs if j.id not in done]
                for d in done:
                    running.pop(d, None)
    return h.hexdigest()


def test_a_cluster_without_queues_plans_as_before_queues_existed(store: ProfileStore) -> None:
    """The digest of these plans on main just before queues were merged (2ba15cc), computed there by the same
    code: a cluster without queues takes none of the quota paths. Update it only with a deliberate planner
    change. The instances' jobs have had work since jobs' weights are sized by it (``pds.job_size``): without
    the sizing, and without stopping a running job for waiting ones (``preempt_outbid``), they plan as they did then."""
    assert _fingerprint(store, PlannerConfig(sizing=SizeWeights(exponent=0.0), preempt_outbid=None))[:16] == "befc483abf6b9fb0"


def test_a_queue_that_does_not_bind_changes_no_decision(store: ProfileStore) -> None:
    """One queue holding the whole cluster, its cap never reached: the same placements, queue and actions
    (the quota goods stay at price 0, so every rent is the same to the bit)."""
    cl = make_cluster(16)
    jobs = random_jobs(10, 3)
    queued = replace(cl, queues=QueueSet((QueueSpec("all", (("a100-40gb", Amount(16.0, 16 * 39.5)),)),)))
    plain = Planner(store).plan(PlanningInput(cl, jobs))
    with_q = Planner(store).plan(PlanningInput(queued, tuple(replace(j, queue="all") for j in jobs)))
    assert with_q.queues[0].used_gpus < 16.0 - 1e-6
    assert [(p.job_id, p.knobs, p.gpus) for p in with_q.placements] == [(p.job_id, p.knobs, p.gpus) for p in plain.placements]
    assert [(a.kind, a.job_id, a.reason) for a in with_q.actions] == [(a.kind, a.job_id, a.reason) for a in plain.actions]
    assert {k: v for k, v in with_q.prices.as_dict().items() if not k.startswith("queue:")} == plain.prices.as_dict()
