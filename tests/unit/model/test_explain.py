"""Why a job waits, in the user's terms: typed shortfalls rendered with units, codes in plain words."""

from __future__ import annotations

import datetime as dt

import pytest

from elastico_core.model.explain import (
    describe_shortfall,
    explain_wait,
    queue_positions,
    rate,
    shortfall_of,
    strip_code,
)
from elastico_core.model.plan import Binding, QueueCode, Shortfall


def test_host_memory_shortfall_reads_like_the_issue() -> None:
    s = Shortfall(Binding.HOST_MEMORY, need=4096.0, free=1536.0, where="gpu-node")
    assert describe_shortfall(s) == "needs 4.0 GiB host memory on a node with a free GPU; most free: 1.5 GiB on gpu-node"


@pytest.mark.parametrize(
    ("shortfall", "expected"),
    [
        (Shortfall(Binding.GPU_MEMORY, 12288, 8704, "gpu-node-1/0"), "needs 12.0 GiB GPU memory on one GPU; most free: 8.5 GiB on gpu-node-1/0"),
        (Shortfall(Binding.CPU, 8, 2, "n1"), "needs 8 CPU cores on a node with a free GPU; most free: 2 CPU cores on n1"),
        (Shortfall(Binding.SM, 0.6, 0.25, None), "needs 60% of a GPU's SMs; most free: 25% of a GPU's SMs"),
        (Shortfall(Binding.GPU_SLOT, 4, 2, None), "needs 4 GPUs that can take another job; most free: 2 GPUs"),
    ],
)
def test_every_resource_has_units(shortfall: Shortfall, expected: str) -> None:
    assert describe_shortfall(shortfall) == expected


def test_floor_shortfall_uses_the_workload_unit() -> None:
    text = describe_shortfall(Shortfall(Binding.FLOOR, 5000, 199.3), unit="tokens/s")
    assert "5,000 tokens/s" in text and "199 tokens/s" in text


def test_priced_out_claims_nothing_it_cannot_show() -> None:
    """Without a shortfall a priced-out job is not said to be outbid "by jobs of higher value" (the
    planner did not check that): it waits for room, behind the job before it in the queue."""
    why = explain_wait(QueueCode.PRICED_OUT, "priced out: its value w*T/T_max is below the rent at current prices",
                       position=3, behind="bert-1")
    text = why.text()
    assert "w*T" not in text and "higher value" not in text
    assert "next after bert-1" in text and "weight" in text
    assert why.position == 3


def test_specific_planner_words_are_kept_and_the_code_is_not_repeated() -> None:
    why = explain_wait("floor-unreachable", "floor-unreachable: floor 5000 tokens/s exceeds the best 199 tokens/s")
    assert why.headline == "floor 5000 tokens/s exceeds the best 199 tokens/s"
    assert strip_code("priced-out: priced out: x", "priced-out") == "priced out: x"


def test_shortfall_from_the_state_column_and_garbage() -> None:
    raw = {"resource": "host_memory", "need": 4096, "free": 1536, "where": "n"}
    assert shortfall_of(raw) == Shortfall(Binding.HOST_MEMORY, 4096.0, 1536.0, "n")
    assert shortfall_of({"resource": "nonsense"}) is None
    assert explain_wait("no-capacity", "", raw).headline.startswith("needs 4.0 GiB host memory")


def test_queue_positions_follow_the_controller_order() -> None:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    jobs = [("a", 0, t0), ("b", 5, t0 + dt.timedelta(seconds=9)), ("c", 0, t0 - dt.timedelta(seconds=1))]
    assert queue_positions(jobs) == {"b": 1, "c": 2, "a": 3}


def test_rate_units_and_unknowns() -> None:
    assert rate(160.44, "samples/s") == "160 samples/s"
    assert rate(531234.0, "samples/s") == "531,234 samples/s"
    assert rate(None, "tokens/s") == "–"


def test_interference_and_price_follow_the_planner_fields() -> None:
    """need = tolerance and free = predicted slowdown; for price, need = rent and free = value (pds.shortfall)."""
    text = describe_shortfall(Shortfall(Binding.INTERFERENCE, need=1.24, free=1.85, where="n0/1"))
    assert "1.85x slowdown" in text and "tolerance is 1.24x" in text
    assert "value (0.2)" in describe_shortfall(Shortfall(Binding.PRICE, need=0.5, free=0.2))


@pytest.mark.parametrize(
    ("code", "shortfall", "unit", "expected"),
    [
        (QueueCode.NO_FEASIBLE_CONFIG, Shortfall(Binding.HOST_MEMORY, 16384, 4096, "n"), "",
         ("needs 16.0 GiB of host memory on one node; the largest node (n) has 4.0 GiB",
          "a node with 16.0 GiB would hold it (it lacks 12.0 GiB)")),
        (QueueCode.NO_FEASIBLE_CONFIG, Shortfall(Binding.GPU_MEMORY, 74650, 40448), "",
         ("needs 72.9 GiB of GPU memory on one GPU; a GPU here has 39.5 GiB for jobs",
          "a configuration needing at most 39.5 GiB of GPU memory per GPU would fit")),
        (QueueCode.NO_FEASIBLE_CONFIG, Shortfall(Binding.CPU, 16, 8, "n"), "",
         ("needs 16 CPU cores on one node; the largest node (n) has 8 CPU cores", "a node with 16 CPU cores")),
        (QueueCode.FLOOR_UNREACHABLE, Shortfall(Binding.FLOOR, 5000, 199.3), "tokens/s",
         ("its floor is 5,000 tokens/s", "a floor of at most 199 tokens/s would let it run")),
        (QueueCode.NO_CAPACITY, Shortfall(Binding.GPU_MEMORY, 12288, 8704, "n0/1", ("a", "b")), "",
         ("most free: 8.5 GiB on n0/1 (held by a, b)", "once another 3.5 GiB is free on n0/1")),
        (QueueCode.INTERFERENCE, Shortfall(Binding.INTERFERENCE, 1.38, 4.13, "n0/1", ("bert-a",)), "",
         ("sharing n0/1 with bert-a predicts a 4.13x slowdown", "when bert-a leave n0/1")),
        (QueueCode.PRICED_OUT, Shortfall(Binding.PRICE, 0.5, 0.2), "",
         ("value (0.2) is below the rent", "a weight 2.5x its current one")),
    ],
    ids=["never-host", "never-gpu-memory", "never-cpu", "floor", "room-with-holders", "interference", "price"],
)
def test_what_would_admit_it_gives_the_number(
    code: QueueCode, shortfall: Shortfall, unit: str, expected: tuple[str, str]
) -> None:
    why = explain_wait(code, "", shortfall, unit=unit)
    assert expected[0] in why.headline and expected[1] in why.admit_hint, why


def test_every_job_gets_its_own_hint() -> None:
    """Not the same sentence for every job: two jobs short of different amounts read differently."""
    a = explain_wait(QueueCode.NO_CAPACITY, "", Shortfall(Binding.GPU_MEMORY, 12288, 8704, "g0"))
    b = explain_wait(QueueCode.NO_CAPACITY, "", Shortfall(Binding.GPU_MEMORY, 30000, 8704, "g1"))
    assert a.admit_hint != b.admit_hint


def test_a_job_the_controller_has_not_looked_at_says_so() -> None:
    assert "not planned this job yet" in explain_wait(None, "registered").headline
