"""The CPU engine: continuous batching over a slot KV cache, with real prefix caching, in plain torch.

It honours the vLLM knobs with vLLM's meaning:
* ``max_num_seqs``: at most this many sequences decode together; a finished one frees its slot for the
  next request (continuous batching);
* ``max_model_len``: prompt + output tokens per sequence; each slot reserves this many positions;
* ``gpu_memory_utilization``: the fraction of the (virtual) device memory the engine may take for
  weights and KV cache; what is left after the slots bounds the prefix cache, and if not even one slot
  fits the engine refuses to start, as vLLM does;
* ``prefix_caching``: reuse the KV of shared prompt blocks (``prefix_cache``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import torch

from elastico_core.model.errors import SpecError
from elastico_core.workloads.lm.model import ByteLM, KVCache
from elastico_core.workloads.prefix_cache import BLOCK, PrefixCache, block_hashes

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_num_seqs: int
    max_model_len: int
    gpu_memory_utilization: float
    prefix_caching: bool
    device_mem_mib: float = 1024.0  # the CPU engine's virtual device: what gpu_memory_utilization is a fraction of

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise SpecError(f"must be >= 1, got {self.max_num_seqs}", field="max_num_seqs")
        if self.max_model_len < 2:
            raise SpecError(f"must be >= 2, got {self.max_model_len}", field="max_model_len")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise SpecError(f"must lie in (0, 1], got {self.gpu_memory_utilization}", field="gpu_memory_utilization")


@dataclass(frozen=True, slots=True)
class Request:
    id: str
    prompt: str
    max_tokens: int
    stop: str | None = None
    temperature: float = 0.0
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Result:
    id: str
    prompt: str
    output: str
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int  # prompt tokens whose KV came from the prefix cache
    finish_reason: str  # stop | length | error
    error: str = ""


@dataclass
class _Seq:
    req: Request
    slot: int
    tokens: list[int]  # prompt + generated
    prompt_len: int
    cached: int
    limit: int  # total tokens allowed (prompt + max_tokens, capped by max_model_len)
    gen: torch.Generator | None
    out: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Tick:
    """One scheduler iteration: ``tokens`` generated in ``dt_s``; cumulative counters after it."""

    tokens: int
    dt_s: float
    active: int
    prefill_tokens: int
    cached_tokens: int
    cpu_s: float = float("nan")


class Engine(Protocol):
    """What the entrypoint drives: the CPU engine here, ``VllmEngine`` on a GPU."""

    slots: int  # sequences that may decode together

    def run(self, requests: Iterable[Request], on_tick: Callable[[Tick], None] | None = None) -> Iterator[Result]:
        """Results in completion order; ``on_tick`` after every scheduler iteration (it may raise to stop)."""
        ...


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def decode(tokens: list[int]) -> str:
    return bytes(tokens).decode("utf-8", errors="replace")


class CpuEngine:
    """Offline batch generation with the byte-level LM; ``run`` yields results as sequences finish."""

    def __init__(self, model: ByteLM, cfg: EngineConfig) -> None:
        self.model = model
        self.cfg = cfg
        weights_mib = sum(p.numel() * p.element_size() for p in model.parameters()) / MIB
        pool_mib = cfg.gpu_memory_utilization * cfg.device_mem_mib - weights_mib
        per_seq_mib = KVCache.bytes_per_token(model.cfg) * cfg.max_model_len / MIB
        slots = min(cfg.max_num_seqs, int(pool_mib // per_seq_mib)) if pool_mib > 0 else 0
        if slots < 1:
            raise SpecError(
                f"max_model_len {cfg.max_model_len} needs {per_seq_mib:.1f} MiB of KV cache per sequence, but "
                f"gpu_memory_utilization {cfg.gpu_memory_utilization} of {cfg.device_mem_mib:.0f} MiB leaves "
                f"{max(pool_mib, 0):.1f} MiB after the weights",
                field="max_model_len",
            )
        self.slots = slots
        self.cache = KVCache.allocate(model.cfg, slots, cfg.max_model_len)
        left_mib = pool_mib - slots * per_seq_mib
        block_mib = KVCache.bytes_per_token(model.cfg) * BLOCK / MIB
        self.prefix = PrefixCache(int(left_mib // block_mib) if cfg.prefix_caching else 0)
        self.prefill_tokens = 0
        self.cached_tokens = 0

    def _slot_views(self, slot: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        return [k[slot] for k in self.cache.k], [v[slot] for v in self.cache.v]

    def _sample(self, logits: torch.Tensor, seq: _Seq) -> int:
        if seq.req.temperature <= 0 or seq.gen is None:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits / seq.req.temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=seq.gen))

    def _admit(self, req: Request, slot: int) -> _Seq | Result:
        tokens = encode(req.prompt)
        if not tokens:
            return Result(req.id, req.prompt, "", 0, 0, 0, "error", "empty prompt")
        if len(tokens) >= self.cfg.max_model_len:
            return Result(req.id, req.prompt, "", len(tokens), 0, 0, "error",
                          f"prompt of {len(tokens)} tokens does not fit max_model_len {self.cfg.max_model_len}")  # fmt: skip
        hashes = block_hashes(tokens) if self.cfg.prefix_caching else []
        k_slot, v_slot = self._slot_views(slot)
        n_blocks = self.prefix.match(hashes, len(tokens))
        self.prefix.load(hashes, n_blocks, k_slot, v_slot)
        cached = n_blocks * BLOCK
        new = tokens[cached:]
        ids = torch.tensor([new])
        pos = torch.arange(cached, len(tokens))[None]
        logits = self.model.step(ids, pos, self.cache, torch.tensor([slot]))[0]
        self.prefix.store(hashes, n_blocks, k_slot, v_slot)
        self.prefill_tokens += len(new)
        self.cached_tokens += cached
        gen = torch.Generator().manual_seed(req.seed) if req.temperature > 0 else None
        limit = min(self.cfg.max_model_len, len(tokens) + req.max_tokens)
        seq = _Seq(req, slot, tokens, len(tokens), cached, limit, gen)
        seq.out.append(self._sample(logits, seq))
        seq.tokens.append(seq.out[-1])
        return seq

    def _finished(self, seq: _Seq) -> str | None:
        if seq.req.stop and decode(seq.out).endswith(seq.req.stop):
            return "stop"
        if len(seq.tokens) >= seq.limit:
            return "length"
        return None

    def _result(self, seq: _Seq, reason: str) -> Result:
        return Result(seq.req.id, seq.req.prompt, decode(seq.out), seq.prompt_len, len(seq.out), seq.cached, reason)

    def run(self, requests: Iterable[Request], on_tick: Callable[[Tick], None] | None = None) -> Iterator[Result]:
        """Generate for every request; results come in completion order."""
        source = iter(requests)
        free = list(range(self.slots - 1, -1, -1))
        active: dict[int, _Seq] = {}
        exhausted = False
        last = (time.perf_counter(), time.process_time())
        while True:
            t0, c0 = last  # from the end of the previous iteration: writing results counts too
            produced = 0
            done: list[Result] = []
            while free and not exhausted:
                req = next(source, None)
                if req is None:
                    exhausted = True
                    break
                slot = free.pop()
                admitted = self._admit(req, slot)
                if isinstance(admitted, Result):
                    free.append(slot)
                    done.append(admitted)
                    continue
                produced += 1
                reason = self._finished(admitted)
                if reason:
                    free.append(slot)
                    done.append(self._result(admitted, reason))
                else:
                    active[slot] = admitted
            if not active and not done and exhausted:
                return
            if active:
                seqs = list(active.values())
                ids = torch.tensor([[s.tokens[-1]] for s in seqs])
                pos = torch.tensor([[len(s.tokens) - 1] for s in seqs])
                logits = self.model.step(ids, pos, self.cache, torch.tensor([s.slot for s in seqs]))
                for row, seq in enumerate(seqs):
                    seq.out.append(self._sample(logits[row], seq))
                    seq.tokens.append(seq.out[-1])
                    produced += 1
                    reason = self._finished(seq)
                    if reason:
                        del active[seq.slot]
                        free.append(seq.slot)
                        done.append(self._result(seq, reason))
            now = last = (time.perf_counter(), time.process_time())
            if on_tick is not None:
                on_tick(Tick(produced, now[0] - t0, len(active), self.prefill_tokens, self.cached_tokens, now[1] - c0))
            yield from done
