"""The board never over-commits a GPU or a node, whatever sequence of operations drives it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elastico_core.bench.instances import make_cluster
from elastico_core.pds.board import Board, Demand

CLUSTER = make_cluster(12, per_node=4)  # three nodes of four GPUs


def test_place_refuses_what_does_not_fit() -> None:
    b = Board(CLUSTER)
    big = Demand(30000.0, 0.5, 4.0, 1024.0, 1, 0)
    b.place(0, 0, big, (0,))
    with pytest.raises(ValueError, match="does not fit"):
        b.place(1, 0, big, (0,))
    with pytest.raises(ValueError, match="already placed"):
        b.place(0, 0, big, (1,))
    b.check()


def test_best_fit_prefers_the_tightest_shared_gpu() -> None:
    b = Board(CLUSTER)
    b.place(0, 0, Demand(30000.0, 0.3, 1, 1, 1, 0), (0,))  # 10000 MiB left
    b.place(1, 0, Demand(20000.0, 0.3, 1, 1, 1, 0), (5,))  # 20000 MiB left
    assert b.find_single(Demand(9000.0, 0.3, 1, 1, 1, 0)) == 0
    assert b.find_single(Demand(15000.0, 0.3, 1, 1, 1, 0)) == 5
    assert b.find_single(Demand(15000.0, 0.8, 1, 1, 1, 0)) not in (0, 5)  # SM would not fit beside them
    assert b.find_single(Demand(9000.0, 0.3, 1, 1, 1, 0), avoid=[0]) == 5  # separated by IAC


def test_gangs_prefer_one_node_and_place_many_is_all_or_nothing() -> None:
    b = Board(CLUSTER)
    gpus = b.find_gang(Demand(10000.0, 0.5, 1, 1, 4, 0))
    assert gpus is not None and len({b.gpu_node[g] for g in gpus}) == 1
    items = [(1, 0, Demand(30000.0, 0.5, 1, 1, 1, 0), (2,)), (2, 0, Demand(30000.0, 0.5, 1, 1, 1, 0), (2,))]
    with pytest.raises(ValueError):
        b.place_many(items)
    assert not b.placed(1) and not b.placed(2)
    b.place_many(items[:1])
    assert b.placed(1)
    b.check()


ops = st.lists(
    st.tuples(
        st.sampled_from(["place", "remove", "many"]),
        st.integers(0, 15),  # job
        st.floats(100, 40000),  # mem
        st.floats(0.01, 1.0),  # sm
        st.sampled_from([1, 1, 1, 2, 4]),  # dp
        st.floats(0, 30),  # cpu
    ),
    max_size=60,
)


@given(ops)
def test_random_operations_keep_every_invariant(seq: list[tuple[str, int, float, float, int, float]]) -> None:
    b = Board(CLUSTER)
    for op, job, mem, sm, dp, cpu in seq:
        d = Demand(mem, sm, cpu, 2048.0, dp, 0)
        if op == "remove":
            if b.placed(job):
                b.remove(job)
        elif not b.placed(job):
            gpus = b.find_gang(d)
            if gpus is not None:
                if op == "many":
                    b.place_many([(job, 0, d, gpus)])
                else:
                    b.place(job, 0, d, gpus)
        b.check()
        # indexes agree with the occupancy they summarise
        for m, lst in enumerate(b.partial):
            assert all(0 < len(b.occ[g]) < b.max_per_gpu and b.gpu_model[g] == m for _, g in lst)
            assert [x for x, _ in lst] == sorted(x for x, _ in lst)
        assert sum(len(e) for e in b.node_empty) == sum(1 for o in b.occ if not o)
        js, ks = b.option_arrays()  # kept between changes, never stale
        assert js.tolist() == list(b.where) and ks.tolist() == [e[0] for e in b.where.values()]


def _indexes(b: Board) -> tuple[object, ...]:
    return (
        [list(lst) for lst in b.partial],
        [list(e) for e in b.node_empty],
        [{k: set(v) for k, v in bk.items()} for bk in b.buckets],
        [list(o) for o in b.occ],
        list(b.free_mem),
        list(b.free_sm),
        list(b.node_free_cpu),
        list(b.node_free_host),
        dict(b.where),
    )


jobs_batch = st.lists(
    st.tuples(st.floats(100, 25000), st.floats(0.01, 0.6), st.sampled_from([1, 1, 1, 2, 4])), min_size=1, max_size=20
)


@given(st.lists(st.tuples(st.floats(100, 25000), st.floats(0.01, 0.6)), max_size=6), jobs_batch)
def test_place_many_leaves_the_indexes_one_at_a_time_placement_would(
    before: list[tuple[float, float]], batch: list[tuple[float, float, int]]
) -> None:
    one, bulk = Board(CLUSTER), Board(CLUSTER)
    for i, (mem, sm) in enumerate(before):  # some GPUs already partly used
        d = Demand(mem, sm, 1.0, 1.0, 1, 0)
        g = one.find_single(d)
        if g is not None:
            one.place(100 + i, 0, d, (g,))
            bulk.place(100 + i, 0, d, (g,))
    items = []
    for job, (mem, sm, dp) in enumerate(batch):
        d = Demand(mem, sm, 1.0, 1.0, dp, 0)
        gpus = one.find_gang(d)
        if gpus is None:
            continue
        one.place(job, 0, d, gpus)
        items.append((job, 0, d, tuple(gpus)))
    bulk.place_many(items)
    bulk.check()
    assert _indexes(bulk) == _indexes(one)


def test_to_back_leaves_the_order_remove_and_place_would_and_changes_no_capacity() -> None:
    d = Demand(10000.0, 0.3, 1.0, 1.0, 1, 0)
    moved, touched = Board(CLUSTER), Board(CLUSTER)
    for b in (moved, touched):
        b.place(0, 0, d, (0,))
        b.place(1, 0, d, (0,))
        b.place(2, 0, d, (3,))
    moved.to_back(0)
    touched.place(0, *touched.remove(0)[:1], d, (0,))
    assert moved.occ == touched.occ and list(moved.where) == list(touched.where) == [1, 2, 0]
    assert moved.free_mem == touched.free_mem and moved.partial == touched.partial
    assert moved.node_free_cpu == touched.node_free_cpu
    moved.check()

