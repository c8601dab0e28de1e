"""PyTorch's CUDA caching allocator, replayed: how much a stream of allocations makes it reserve.

The device memory a training job holds is what the caching allocator reserved (``cudaMalloc``'d
segments it keeps), not what its live tensors add up to: freed blocks stay cached, a large block is
split for a smaller request, and a request no cached block fits gets a new segment. This module
replays a traced stream of allocations and frees with the allocator's documented rules
(``c10/cuda/CUDACachingAllocator.cpp``, default configuration, one stream, no ``empty_cache``):

* every request is rounded up to a multiple of 512 B;
* requests up to 1 MiB come from a *small* pool whose segments are 2 MiB; larger ones from a *large*
  pool whose new segments are 20 MiB for requests under 10 MiB, else the request rounded up to 2 MiB;
* a request takes the smallest cached free block of its pool that fits (best fit, lowest address on a
  tie) and splits it when the remainder is at least 512 B (small pool) or more than 1 MiB (large pool);
* a freed block merges with free neighbours of its segment; segments are never returned.

Pure Python over integers, so the same replay runs wherever the trace is read.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20  # largest "small" request
SMALL_BUFFER = 2 << 20  # small-pool segment
LARGE_BUFFER = 20 << 20  # segment for 1-10 MiB requests
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20

Event = tuple[int, int]  # (+size, id) allocates ``size`` bytes as block ``id``; (-1, id) frees it


def round_size(size: int) -> int:
    return MIN_BLOCK if size < MIN_BLOCK else MIN_BLOCK * ((size + MIN_BLOCK - 1) // MIN_BLOCK)


def segment_size(size: int) -> int:
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((size + ROUND_LARGE - 1) // ROUND_LARGE)


@dataclass(slots=True)
class _Block:
    small: bool  # the pool of its segment
    segment: int
    offset: int
    size: int
    free: bool = True
    prev: _Block | None = None
    next: _Block | None = None

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.size, self.segment, self.offset)


@dataclass(frozen=True, slots=True)
class AllocatorPeaks:
    """What a replay ends with: the peaks of live (allocated, rounded) and reserved bytes."""

    allocated: int
    reserved: int
    segments: int


class CachingAllocator:
    """One device's caching allocator: ``malloc``/``free`` by block id, peaks kept as it goes."""

    def __init__(self) -> None:
        self._pools: dict[bool, list[tuple[int, int, int]]] = {True: [], False: []}  # sorted (size, segment, offset)
        self._free: dict[tuple[int, int], _Block] = {}
        self._live: dict[int, _Block] = {}
        self._segments = 0
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0

    def _insert(self, block: _Block) -> None:
        bisect.insort(self._pools[block.small], block.key)
        self._free[(block.segment, block.offset)] = block

    def _remove(self, block: _Block) -> None:
        pool = self._pools[block.small]
        del pool[bisect.bisect_left(pool, block.key)]
        del self._free[(block.segment, block.offset)]

    def malloc(self, ident: int, nbytes: int) -> None:
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1, -1))
        if i < len(pool):
            _, seg, off = pool[i]
            block = self._free[(seg, off)]
            self._remove(block)
        else:  # no cached block fits: a new segment (cudaMalloc)
            block = _Block(small, self._segments, 0, segment_size(size))
            self._segments += 1
            self.reserved += block.size
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        remaining = block.size - size
        if (remaining >= MIN_BLOCK) if small else (remaining > SMALL_SIZE):
            rest = _Block(small, block.segment, block.offset + size, remaining, True, block, block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next, block.size = rest, size
            self._insert(rest)
        block.free = False
        self._live[ident] = block
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, ident: int) -> None:
        block = self._live.pop(ident)
        self.allocated -= block.size
        block.free = True
        prev, nxt = block.prev, block.next
        if prev is not None and prev.free:  # merge into the free block before
            self._remove(prev)
            prev.size += block.size
            prev.next = nxt
            if nxt is not None:
                nxt.prev = prev
            block = prev
        if nxt is not None and nxt.free:  # absorb the free block after
            self._remove(nxt)
            block.size += nxt.size
            block.next = nxt.next
            if nxt.next is not None:
                nxt.next.prev = block
        self._insert(block)

    def peaks(self) -> AllocatorPeaks:
        return AllocatorPeaks(self.peak_allocated, self.peak_reserved, self._segments)


def replay(events: Iterable[Event]) -> AllocatorPeaks:
    """Peaks of allocated and reserved bytes after replaying ``events`` on a fresh allocator."""
    alloc = CachingAllocator()
    for size, ident in events:
        if size >= 0:
            alloc.malloc(ident, size)
        else:
            alloc.free(ident)
    return alloc.peaks()
