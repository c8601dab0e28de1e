"""Shorter jobs first (``pds.job_size``): the size factor, and what it changes in a plan."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from elastico_core.bench.instances import make_cluster
from elastico_core.model import JobSpec
from elastico_core.model.plan import ActionKind, QueueCode
from elastico_core.model.state import Assignment
from elastico_core.pds.job_size import SizeWeights
from elastico_core.pds.planner import Planner, PlannerConfig, PlanningInput
from elastico_core.rst.catalog import PAPER_WORKLOADS as W
from elastico_core.rst.store import ProfileStore

SIZE = SizeWeights()
seconds = st.floats(min_value=0.0, max_value=1e9, allow_nan=False)


@given(seconds, seconds)
def test_a_shorter_job_never_weighs_less_and_no_job_beyond_the_cap(a: float, b: float) -> None:
    short, long = sorted((a, b))
    fa, fb = SIZE.factor(short, 1.0), SIZE.factor(long, 1.0)
    assert fa >= fb
    assert 1 / SIZE.cap <= fb <= fa <= SIZE.cap
    grid = math.log2(fa) * SIZE.steps_per_octave
    assert abs(grid - round(grid)) < 1e-9  # on the grid


def test_unknown_work_or_no_sizing_keeps_the_weight() -> None:
    assert SIZE.factor(math.inf, 10.0) == 1.0
    assert SIZE.factor(100.0, 0.0) == 1.0
    assert SizeWeights(exponent=0.0).factor(1.0, 10.0) == 1.0
    assert SIZE.factor(SIZE.reference_s * 10.0, 10.0) == 1.0  # the reference run time keeps it
    assert SIZE.factor(SIZE.reference_s * 10.0 / 4.0, 10.0) == 2.0  # a quarter of it: x sqrt(4)


def _rigid(name: str, work: float, at: float) -> JobSpec:
    """A Transformer at its default configuration only (38 GiB): two never share a 40-GB GPU."""
    rigid = tuple(s.restricted((W["transformer"].defaults[s.name],)) for s in W["transformer"].knobs)
    return JobSpec(name, W["transformer"], knob_space=rigid, work=work, submit_time_s=at)


def test_on_a_full_gpu_the_short_job_goes_first_and_without_sizing_the_first_come(store: ProfileStore) -> None:
    jobs = (_rigid("long", 1e12, 0.0), _rigid("short", 1.0, 1.0))
    inp = PlanningInput(make_cluster(1), jobs)
    plan = Planner(store).plan(inp)
    assert [p.job_id for p in plan.placements] == ["short"] and plan.queued_ids == ("long",)
    fifo = Planner(store, config=PlannerConfig(sizing=SizeWeights(exponent=0.0), preempt_outbid=None)).plan(inp)
    assert [p.job_id for p in fifo.placements] == ["long"] and fifo.queued_ids == ("short",)


def test_the_row_weight_is_the_users_weight_times_the_size_and_the_queue_follows_it(store: ProfileStore) -> None:
    jobs = (_rigid("a", 1e12, 0.0), replace(_rigid("b", 1.0, 1.0), weight=2.0), _rigid("c", math.inf, 2.0),
            _rigid("d", 1.0, 3.0))
    planner = Planner(store)
    prep = planner.prepare(PlanningInput(make_cluster(1), jobs))
    weights = dict(zip(prep.table.job_ids, prep.table.weight.tolist(), strict=True))
    assert weights == {"b": 2.0 * SIZE.cap, "d": SIZE.cap, "c": 1.0, "a": 1 / SIZE.cap}
    assert prep.table.job_ids == ("b", "d", "c", "a")  # size first, arrival order among equals


def _running(plan_of_long: object, job: JobSpec) -> dict[str, Assignment]:
    p = next(p for p in plan_of_long.placements if p.job_id == job.id)  # type: ignore[attr-defined]
    return {job.id: Assignment(job.id, p.knobs, p.gpus)}


def test_a_long_running_job_is_outbid_only_under_the_rule_and_only_by_its_priority_or_higher(store: ProfileStore) -> None:
    """``preempt_outbid`` (production 0.3): the long job that holds the only GPU is checkpointed for a much
    shorter one that waits (code ``outbid``, a preempt action, the reason names the rent against its value);
    without the rule, or when the waiting job's priority is lower, it keeps running. Nothing is lost."""
    long, short = _rigid("long", 1e12, 0.0), _rigid("short", 1.0, 1.0)
    cluster = make_cluster(1)
    first = Planner(store).plan(PlanningInput(cluster, (long,)))
    running = _running(first, long)
    inp = PlanningInput(cluster, (long, short), running=running, waiting=frozenset({"short"}))
    rules = PlannerConfig()  # production: preempt_outbid 0.3
    plan = Planner(store, config=rules).plan(inp)
    assert [p.job_id for p in plan.placements] == ["short"]
    (q,) = plan.queued
    assert q.job_id == "long" and q.code is QueueCode.OUTBID and q.reason.startswith("outbid: checkpointed for shorter jobs that waited; its value")
    assert {a.job_id: a.kind for a in plan.actions} == {"short": ActionKind.ADMIT, "long": ActionKind.PREEMPT}
    kept = Planner(store, config=PlannerConfig(preempt_outbid=None)).plan(inp)  # off: never stopped for a waiting one
    assert [p.job_id for p in kept.placements] == ["long"] and kept.queued_ids == ("short",)
    lower = replace(short, priority=-1)
    inp_low = PlanningInput(cluster, (long, lower), running=running, waiting=frozenset({"short"}))
    protected = Planner(store, config=rules).plan(inp_low)
    assert [p.job_id for p in protected.placements] == ["long"] and protected.queued_ids == ("short",)


def test_an_outbid_job_whose_room_nobody_takes_keeps_running(store: ProfileStore) -> None:
    """ESP may stop a running job for demand the packer then cannot place where it ran: it stays (no
    checkpoint for nothing). Two GPUs, the long job on one, a short job waiting fits the other."""
    long, short = _rigid("long", 1e12, 0.0), _rigid("short", 1.0, 1.0)
    cluster = make_cluster(2)
    first = Planner(store).plan(PlanningInput(cluster, (long,)))
    inp = PlanningInput(cluster, (long, short), running=_running(first, long), waiting=frozenset({"short"}))
    plan = Planner(store, config=PlannerConfig(preempt_outbid=0.0)).plan(inp)
    assert sorted(p.job_id for p in plan.placements) == ["long", "short"] and not plan.queued
    assert next(p for p in plan.placements if p.job_id == "long").gpus == first.placements[0].gpus
