"""The caching-allocator replay follows PyTorch's rules: pools, rounding, best fit, splitting, merging."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from elastico_core.workloads.tracing.allocator import CachingAllocator, replay

MIB = 1 << 20


def test_a_freed_block_is_reused_not_reallocated() -> None:
    peaks = replay([(3 * MIB, 1), (-1, 1), (3 * MIB, 2)])
    assert peaks.reserved == 20 * MIB and peaks.segments == 1  # requests of 1-10 MiB get a 20 MiB segment


def test_small_requests_share_a_2_mib_segment() -> None:
    peaks = replay([(256 << 10, i) for i in range(4)])
    assert peaks.reserved == 2 * MIB and peaks.segments == 1
    assert replay([(100, 1)]).allocated == 512  # rounded up to 512 bytes


def test_large_requests_round_to_2_mib() -> None:
    assert replay([(11 * MIB, 1)]).reserved == 12 * MIB


def test_a_remainder_of_a_mib_or_less_is_not_split_off() -> None:
    a = CachingAllocator()
    a.malloc(1, 30 * MIB)
    a.free(1)
    a.malloc(2, 29 * MIB + MIB // 2)  # remainder 0.5 MiB: the whole block is handed out
    assert a.allocated == 30 * MIB
    a.malloc(3, 2 * MIB)  # nothing cached is left: a new segment
    assert a.peaks().segments == 2


def test_neighbours_merge_when_freed() -> None:
    a = CachingAllocator()
    a.malloc(1, 40 * MIB)
    a.free(1)
    a.malloc(2, 12 * MIB)
    a.malloc(3, 12 * MIB)  # both split from the 40 MiB segment
    a.free(2)
    a.free(3)
    a.malloc(4, 38 * MIB)  # fits only if the three free pieces merged back
    assert a.peaks().segments == 1 and a.reserved == 40 * MIB


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 64 * MIB)), max_size=80))
def test_reserved_covers_what_is_live_and_replays_the_same(ops: list[tuple[bool, int]]) -> None:
    events, live, ident = [], [], 0
    for free, size in ops:
        if free and live:
            events.append((-1, live.pop(size % len(live))))
        else:
            events.append((size, ident))
            live.append(ident)
            ident += 1
    a = CachingAllocator()
    for size, i in events:
        a.malloc(i, size) if size >= 0 else a.free(i)
        assert a.reserved >= a.allocated
    first = a.peaks()
    assert first == replay(events) and first.reserved >= first.allocated
