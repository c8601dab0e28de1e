"""Shorter jobs first (``pds.job_size``): the size factor, and what it changes in a plan."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from elastico_core.bench.instances import make_cluster
from elastico_core.model import JobSpec
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
    fifo = Planner(store, config=PlannerConfig(sizing=SizeWeights(exponent=0.0))).plan(inp)
    assert [p.job_id for p in fifo.placements] == ["long"] and fifo.queued_ids == ("short",)


def test_the_row_weight_is_the_users_weight_times_the_size_and_the_queue_follows_it(store: ProfileStore) -> None:
    jobs = (_rigid("a", 1e12, 0.0), replace(_rigid("b", 1.0, 1.0), weight=2.0), _rigid("c", math.inf, 2.0),
            _rigid("d", 1.0, 3.0))
    planner = Planner(store)
    prep = planner.prepare(PlanningInput(make_cluster(1), jobs))
    weights = dict(zip(prep.table.job_ids, prep.table.weight.tolist(), strict=True))
    assert weights == {"b": 2.0 * SIZE.cap, "d": SIZE.cap, "c": 1.0, "a": 1 / SIZE.cap}
    assert prep.table.job_ids == ("b", "d", "c", "a")  # size first, arrival order among equals
