"""A queued job's shortfall names the resource that binds, in its own unit, and never blames memory a usable GPU has."""

from __future__ import annotations

import json

import pytest

from elastico_core.bench.instances import make_cluster, random_jobs
from elastico_core.model import QueueCode
from elastico_core.model.cluster import Cluster, Node
from elastico_core.model.explain import describe_shortfall
from elastico_core.model.hardware import gpu_model
from elastico_core.model.plan import Binding, Shortfall
from elastico_core.pds.board import Board, Demand
from elastico_core.pds.planner import Planner, PlanningInput
from elastico_core.pds.shortfall import Room, capacity_shortfall, render, smallest_shortfall
from elastico_core.rst.store import ProfileStore
from tests.cli.test_plan_cli import elastico

A100 = gpu_model("a100-40gb")


def _node(name: str, gpus: int = 2, cpu: float = 16.0, host_gib: float = 64.0) -> Node:
    return Node(name, A100, gpus, cpu_cores=cpu, host_mem_mib=host_gib * 1024)


def _board(*nodes: Node, per_gpu: int = 2) -> Board:
    return Board(Cluster("t", nodes, max_jobs_per_gpu=per_gpu))


@pytest.mark.parametrize(
    ("placed", "ask", "expect"),
    [
        # node host memory full while GPU memory is free (the demo cluster's case)
        ([(0, Demand(10000, 0.4, 4, 64 * 1024, 1, 0))], Demand(4096, 0.2, 2, 8192, 1, 0), (Binding.HOST_MEMORY, 8192, 0.0, "n0")),
        ([(0, Demand(10000, 0.4, 16, 1024, 1, 0))], Demand(4096, 0.2, 2, 1024, 1, 0), (Binding.CPU, 2, 0.0, "n0")),
        ([(0, Demand(35000, 0.3, 1, 1024, 1, 0)), (1, Demand(36000, 0.3, 1, 1024, 1, 0))],
         Demand(8000, 0.2, 1, 1024, 1, 0), (Binding.GPU_MEMORY, 8000, 40448 - 35000, "n0/0")),
        ([(0, Demand(1000, 0.9, 1, 1024, 1, 0)), (1, Demand(1000, 0.8, 1, 1024, 1, 0))],
         Demand(1000, 0.5, 1, 1024, 1, 0), (Binding.SM, 0.5, pytest.approx(0.2), "n0/1")),
    ],
    ids=["host-memory", "cpu", "gpu-memory", "sm"],
)
def test_the_binding_resource_on_one_node(placed: list[tuple[int, Demand]], ask: Demand, expect: tuple[object, ...]) -> None:
    b = _board(_node("n0"))
    for job, (g, d) in enumerate(placed):
        b.place(job, 0, d, (g,))
    s = capacity_shortfall(Room.of(b), ask)
    assert s is not None and (s.resource, s.need, s.free, s.where) == expect
    assert s.free < s.need


def test_slots_bind_when_every_gpu_holds_its_maximum() -> None:
    b = _board(_node("n0"), per_gpu=1)
    for g in range(2):
        b.place(g, 0, Demand(1000, 0.1, 1, 1024, 1, 0), (g,))
    s = capacity_shortfall(Room.of(b), Demand(1000, 0.1, 1, 1024, 1, 0))
    assert s is not None and s.resource is Binding.GPU_SLOT and (s.need, s.free) == (1.0, 0.0)


def test_memory_is_not_blamed_where_a_usable_gpu_has_it() -> None:
    """GPU memory is free on n0 (whose host memory is full); n1 has host memory but a full GPU: a tie
    between two resources never names GPU memory, and the free figure comes from a GPU short of it."""
    b = _board(_node("n0", gpus=1), _node("n1", gpus=1))
    b.place(0, 0, Demand(1000, 0.1, 1, 64 * 1024, 1, 0), (0,))
    b.place(1, 0, Demand(40000, 0.1, 1, 1024, 1, 0), (1,))
    s = capacity_shortfall(Room.of(b), Demand(8000, 0.1, 1, 8192, 1, 0))
    assert s is not None and s.resource is Binding.HOST_MEMORY and s.where == "n0"


def test_a_gang_short_of_gpus_and_a_fitting_option_has_no_shortfall() -> None:
    b = _board(_node("n0", gpus=4), per_gpu=1)
    b.place(0, 0, Demand(1000, 0.1, 1, 1024, 1, 0), (0,))
    room = Room.of(b)
    gang = capacity_shortfall(room, Demand(1000, 0.1, 1, 1024, 4, 0))
    assert gang == Shortfall(Binding.GPU_SLOT, 4.0, 3.0, None)
    assert smallest_shortfall(room, [Demand(1000, 0.1, 1, 1024, 4, 0), Demand(1000, 0.1, 1, 1024, 2, 0)]) is None


def test_reasons_are_rendered_from_the_shortfall() -> None:
    s = Shortfall(Binding.HOST_MEMORY, 16384.0, 0.0, "gpu-node")
    assert render(QueueCode.NO_CAPACITY, s) == "no room beside the jobs admitted: " + describe_shortfall(s)
    assert "16.0 GiB" in render(QueueCode.NO_CAPACITY, s) and "gpu-node" in render(QueueCode.NO_CAPACITY, s)
    assert render(QueueCode.PRICED_OUT, Shortfall(Binding.PRICE, 0.4, 0.3)).startswith("priced out: its value")


def test_demo_cluster_queues_on_host_memory() -> None:
    """On the demo cluster (2 x A100-40GB, 64 GiB of host memory) with the example jobs, host memory binds.

    Table 6's pairs, named: ``--predictor auto`` would load whatever champion the checkout's own MLflow store
    holds (``make demo`` registers one), and a different model may keep a pair apart before memory binds."""
    r = elastico("plan", "--cluster", "scripts/demo/cluster.yaml", "--jobs", "examples/jobs.yaml", "--predictor", "table", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    used = {g: 0.0 for g in ("gpu-node/0", "gpu-node/1")}
    for p in plan["placements"]:
        for g in p["gpus"]:
            used[g] += p["memory_mib"]
    assert plan["queued"]
    for q in plan["queued"]:
        short = q["shortfall"]
        assert set(short) == {"resource", "need", "free", "where", "holders"}
        assert short["resource"] == "host_memory" and short["where"] == "gpu-node", q
        assert short["free"] < short["need"] and "host memory" in q["reason"]
        placed_there = {p["job"] for p in plan["placements"] if any(g.startswith("gpu-node/") for g in p["gpus"])}
        assert set(short["holders"]) == placed_there  # whom it waits for: the node's jobs, from the same plan


def test_every_queued_job_of_a_saturated_cluster_has_a_true_shortfall(store: ProfileStore) -> None:
    cluster = make_cluster(8)
    plan = Planner(store).plan(PlanningInput(cluster, random_jobs(40, seed=3)))
    assert plan.queued
    for q in plan.queued:
        assert q.shortfall is not None, q
        if q.shortfall.resource in (Binding.GPU_MEMORY, Binding.SM, Binding.CPU, Binding.HOST_MEMORY, Binding.GPU_SLOT):
            assert q.shortfall.free < q.shortfall.need, q
