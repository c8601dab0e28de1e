"""Prefix caching (vLLM's automatic prefix caching, in miniature): reuse the KV of shared prompt blocks.

Prompts are cut into blocks of ``BLOCK`` tokens; a block is identified by the hash of its tokens chained
with the hash of the block before it, so equal hashes mean equal prefixes. Cached blocks hold the keys
and values of every layer and are evicted least-recently-used when the KV pool is full.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

BLOCK = 16


def block_hashes(tokens: Sequence[int]) -> list[int]:
    """Chained hashes of the prompt's full blocks (a partial last block is never cached)."""
    out, parent = [], 0
    for i in range(len(tokens) // BLOCK):
        parent = hash((parent, tuple(tokens[i * BLOCK : (i + 1) * BLOCK])))
        out.append(parent)
    return out


@dataclass
class PrefixCache:
    """LRU map block-hash -> (keys, values) of shape [layers, heads, BLOCK, head_dim]."""

    capacity_blocks: int
    blocks: OrderedDict[int, tuple[Tensor, Tensor]] = field(default_factory=OrderedDict)
    hits: int = 0  # tokens served from the cache
    misses: int = 0  # prompt tokens that had to be prefilled

    def match(self, hashes: Sequence[int], prompt_len: int) -> int:
        """How many leading blocks are cached; always leaves >= 1 token to prefill (its logits start decoding)."""
        n = 0
        for h in hashes:
            if h not in self.blocks or (n + 1) * BLOCK >= prompt_len:
                break
            self.blocks.move_to_end(h)
            n += 1
        return n

    def load(self, hashes: Sequence[int], n: int, k_slot: list[Tensor], v_slot: list[Tensor]) -> None:
        """Copy the first ``n`` cached blocks into one sequence's cache slot (per-layer [heads, len, dim] views)."""
        for i in range(n):
            k, v = self.blocks[hashes[i]]
            for layer in range(len(k_slot)):
                k_slot[layer][:, i * BLOCK : (i + 1) * BLOCK] = k[layer]
                v_slot[layer][:, i * BLOCK : (i + 1) * BLOCK] = v[layer]

    def store(self, hashes: Sequence[int], first: int, k_slot: list[Tensor], v_slot: list[Tensor]) -> None:
        """Remember blocks ``first..`` of a freshly prefilled prompt, evicting the least recently used."""
        if self.capacity_blocks <= 0:
            return
        for i in range(first, len(hashes)):
            if hashes[i] in self.blocks:
                self.blocks.move_to_end(hashes[i])
                continue
            sl = slice(i * BLOCK, (i + 1) * BLOCK)
            k = torch.stack([layer[:, sl] for layer in k_slot]).clone()
            v = torch.stack([layer[:, sl] for layer in v_slot]).clone()
            self.blocks[hashes[i]] = (k, v)
            while len(self.blocks) > self.capacity_blocks:
                self.blocks.popitem(last=False)
