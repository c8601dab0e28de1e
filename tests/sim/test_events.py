"""The event heap: order by time, then kind (state changes before the epoch), then insertion."""

from __future__ import annotations

import pytest

from elastico_core.sim.events import Engine, Epoch, Event, JobArrival, JobFinish, TransitionDone


def test_same_time_orders_state_changes_before_the_epoch() -> None:
    eng = Engine()
    for ev in (Epoch(10.0), JobArrival(10.0, "a"), TransitionDone(10.0, "b", 1), JobFinish(10.0, "c", 1), JobArrival(5.0, "z")):
        eng.schedule(ev)
    seen: list[Event] = []
    eng.run(lambda ev: seen.append(ev) or [])
    assert [type(e).__name__ for e in seen] == ["JobArrival", "JobFinish", "TransitionDone", "JobArrival", "Epoch"]
    assert seen[0] == JobArrival(5.0, "z")


def test_insertion_order_breaks_ties_and_is_per_instance() -> None:
    a, b = Engine(), Engine()
    for eng in (a, b):
        for name in ("x", "y", "z"):
            eng.schedule(JobArrival(1.0, name))
    got = []
    a.run(lambda ev: got.append(ev.job_id) or [])  # type: ignore[union-attr]
    assert got == ["x", "y", "z"]
    assert len(b) == 3  # the other engine is untouched


def test_handlers_schedule_follow_ups_and_until_stops() -> None:
    eng = Engine()
    eng.schedule(JobArrival(0.0, "a"))

    def handle(ev: Event) -> list[Event]:
        return [Epoch(ev.time + 5.0)] if ev.time < 20 else []

    eng.run(handle, until=12.0)
    assert eng.now == 12.0 and eng.processed == 3
    eng.run(handle)
    assert eng.processed == 5  # epochs at 15 and 20; 20 schedules nothing


def test_scheduling_in_the_past_is_refused() -> None:
    eng = Engine()
    eng.schedule(Epoch(5.0))
    eng.run(lambda ev: [])
    with pytest.raises(ValueError):
        eng.schedule(Epoch(1.0))
