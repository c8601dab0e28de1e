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



def test_try_place_answers_with_a_typed_status_and_changes_nothing_on_refusal() -> None:
    from elastico_core.pds.board import Fit

    b = Board(CLUSTER)
    big = Demand(30000.0, 0.5, 4.0, 1024.0, 1, 0)
    assert b.try_place(0, 0, big, (0,)).ok
    before = (list(b.free_mem), list(b.free_sm), list(b.node_free_cpu), list(b.node_free_host))
    refused = b.try_place(1, 0, big, (0,))
    assert refused.code is Fit.GPU and refused.where == 0
    assert b.try_place(0, 0, big, (1,)).code is Fit.PLACED
    assert b.try_place(3, 0, Demand(100.0, 0.1, 1.0, 1.0, 2, 0), (1, 2, 3)).code is Fit.GANG
    hungry = Demand(100.0, 0.1, 1000.0, 1.0, 1, 0)  # more CPU than a node has
    assert b.try_place(4, 0, hungry, (5,)).code is Fit.NODE
    assert (list(b.free_mem), list(b.free_sm), list(b.node_free_cpu), list(b.node_free_host)) == before
    assert not b.placed(1) and not b.placed(3) and not b.placed(4)


def test_a_tentative_placement_is_undone_unless_committed() -> None:
    b = Board(CLUSTER)
    d = Demand(10000.0, 0.3, 1.0, 1024.0, 1, 0)
    b.place(0, 0, d, (0,))
    b.place(1, 0, d, (0,))
    state = (dict(b.where), [sorted(o) for o in b.occ], list(b.free_mem), list(b.node_free_host))
    with b.tentative() as tx:
        tx.remove(0)
        assert tx.place(0, 1, Demand(20000.0, 0.3, 1.0, 1024.0, 1, 0), (4,)).ok
        assert tx.place(2, 0, d, (0,)).ok
    # as it was (a job taken off and put back goes to the back of the board's orders, as a re-placement would)
    assert (dict(b.where), [sorted(o) for o in b.occ], list(b.free_mem), list(b.node_free_host)) == state
    with b.tentative() as tx:
        tx.remove(1)
        assert tx.place(1, 0, d, (7,)).ok
        tx.commit()
    assert b.where[1][2] == (7,) and b.occ[0] == [0]
    b.check()


@given(ops, st.integers(0, 59))
def test_discard_restores_the_board_exactly(seq: list[tuple[str, int, float, float, int, float]], split: int) -> None:
    """Whatever a transaction does, discarding it gives back the board it started from."""
    b = Board(CLUSTER)
    for kind, job, mem, sm, dp, cpu in seq[:split]:
        d = Demand(mem, sm, cpu, 1024.0, dp, 0)
        if kind == "remove" and b.placed(job):
            b.remove(job)
        elif not b.placed(job):
            gpus = b.find_gang(d)
            if gpus is not None:
                b.place(job, 0, d, gpus)
    state = ({j: (e[0], e[2]) for j, e in b.where.items()}, sorted(map(sorted, b.occ)))
    free = (list(b.free_mem), list(b.free_sm), list(b.node_free_cpu), list(b.node_free_host))
    with b.tentative() as tx:
        for kind, job, mem, sm, dp, cpu in seq[split:]:
            d = Demand(mem, sm, cpu, 1024.0, dp, 0)
            if kind == "remove" and b.placed(job):
                tx.remove(job)
            elif not b.placed(job):
                gpus = b.find_gang(d)
                if gpus is not None:
                    assert tx.place(job, 1, d, gpus).ok
    assert ({j: (e[0], e[2]) for j, e in b.where.items()}, sorted(map(sorted, b.occ))) == state
    after = (list(b.free_mem), list(b.free_sm), list(b.node_free_cpu), list(b.node_free_host))
    for x, y in zip(after, free, strict=True):
        assert x == pytest.approx(y, abs=1e-6)
    b.check()


def _whole_gpus_by_hand(b: Board, count: int) -> tuple[int, ...] | None:
    """The consolidated choice spelt out over every GPU: the fullest node with ``count`` empty GPUs
    (lowest node on ties), else whole nodes, most empty GPUs first; a node's GPUs lowest first."""
    free = [[g for g in gs if not b.occ[g]] for gs in b.node_gpus]
    if sum(map(len, free)) < count:
        return None
    fitting = [n for n, f in enumerate(free) if len(f) >= count]
    if fitting:
        n = min(fitting, key=lambda n: (len(free[n]), n))
        return tuple(free[n][:count])
    out: list[int] = []
    for n in sorted(range(len(free)), key=lambda n: (-len(free[n]), n)):
        out.extend(free[n][: count - len(out)])
        if len(out) == count:
            return tuple(out)
    return None


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 11)), max_size=40), st.integers(1, 12))
def test_whole_gpus_is_the_consolidated_choice_in_cluster_order(ops: list[tuple[bool, int]], count: int) -> None:
    b = Board(CLUSTER)
    small = Demand(1000.0, 0.1, 1.0, 1.0, 1, 0)
    for job, (add, g) in enumerate(ops):
        if add:
            b.try_place(job, 0, small, (g,))
        elif b.occ[g]:
            b.remove(b.occ[g][0])
    want = Demand(1000.0, 0.1, 1.0, 1.0, count, 0)
    assert b.whole_gpus(want) == _whole_gpus_by_hand(b, count)
    got = b.whole_gpus(want)
    if got is not None:
        assert all(not b.occ[g] for g in got) and b.try_place(99, 0, want, got).ok


def test_whole_gpus_passes_over_a_node_short_of_cpu() -> None:
    b = Board(CLUSTER)  # nodes of four GPUs, 64 cores each
    b.place(0, 0, Demand(1000.0, 0.1, 60.0, 1.0, 1, 0), (0,))  # node 0: three empty GPUs, 4 cores left
    two = Demand(1000.0, 0.1, 1.0, 1.0, 2, 0)
    assert b.whole_gpus(two) == (1, 2)  # the fullest node
    assert b.whole_gpus(Demand(1000.0, 0.1, 3.0, 1.0, 2, 0)) == (4, 5)  # node 0 lacks 6 cores
    assert b.whole_gpus(Demand(1000.0, 0.1, 1.0, 1.0, 12, 0)) is None  # eleven empty GPUs
    spread = b.whole_gpus(Demand(1000.0, 0.1, 1.0, 1.0, 10, 0))
    assert spread == (4, 5, 6, 7, 8, 9, 10, 11, 1, 2)  # whole nodes first, emptiest first
    assert b.whole_gpus(Demand(1000.0, 0.1, 1.0, 1.0, 10, 0, one_node=True)) is None
