"""What the inference entrypoint hands the engine and gets back: plain values, no vLLM import.

The knobs keep vLLM's meaning on every device; only where the KV cache's memory comes from differs:
on a GPU ``gpu_memory_utilization`` is the fraction of the device vLLM may take; on a CPU vLLM reads
that same argument as a fraction of *host RAM*, so the CPU engine gets an explicit KV-cache size
instead (``kv_cache_mib``, by default ``gpu_memory_utilization`` of a virtual device of
``device_mem_mib``), which keeps the knob meaningful and the machine safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from elastico_core.model.errors import SpecError
from elastico_core.model.knobs import TP_SIZES

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_num_seqs: int
    max_model_len: int
    gpu_memory_utilization: float
    prefix_caching: bool
    tensor_parallel_size: int = 1
    device: str = "cpu"  # cpu | cuda
    device_mem_mib: float = 256.0  # CPU: the virtual device that gpu_memory_utilization is a fraction of
    kv_cache_mib: float | None = None  # CPU: the KV cache's size; None -> gpu_memory_utilization * device_mem_mib

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise SpecError(f"must be >= 1, got {self.max_num_seqs}", field="max_num_seqs")
        if self.max_model_len < 2:
            raise SpecError(f"must be >= 2, got {self.max_model_len}", field="max_model_len")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise SpecError(f"must lie in (0, 1], got {self.gpu_memory_utilization}", field="gpu_memory_utilization")
        if self.tensor_parallel_size not in TP_SIZES:
            raise SpecError(
                f"must be one of {', '.join(map(str, TP_SIZES))}, got {self.tensor_parallel_size}",
                field="tensor_parallel_size",
            )
        if self.device not in ("cpu", "cuda"):
            raise SpecError(f"must be cpu or cuda, got {self.device!r}", field="device")
        if self.kv_cache_mib is not None and self.kv_cache_mib <= 0:
            raise SpecError(f"must be > 0, got {self.kv_cache_mib}", field="kv_cache_mib")

    @property
    def kv_cache_bytes(self) -> int:
        """CPU: the explicit KV-cache size handed to vLLM (``kv_cache_memory_bytes``)."""
        mib = self.kv_cache_mib if self.kv_cache_mib is not None else self.gpu_memory_utilization * self.device_mem_mib
        return int(mib * MIB)


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
    cached_tokens: int  # prompt tokens whose KV came from vLLM's prefix cache (RequestOutput.num_cached_tokens)
    finish_reason: str  # stop | length | error
    error: str = ""


@dataclass(frozen=True, slots=True)
class Tick:
    """One engine step: ``tokens`` generated in ``dt_s`` by ``active`` sequences; cumulative counters after it."""

    tokens: int
    dt_s: float
    active: int
    prefill_tokens: int
    cached_tokens: int
    cpu_s: float = float("nan")


@dataclass(frozen=True, slots=True)
class EngineStats:
    """vLLM's own counters (``LLM.get_metrics()``), cumulative since the engine started."""

    prompt_tokens: int
    generation_tokens: int
    prefix_cache_queries: int  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int  # of which found there
    requests: int

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "prefix_cache_queries": self.prefix_cache_queries,
            "prefix_cache_hits": self.prefix_cache_hits,
            "prefix_hit_rate": round(self.prefix_hit_rate, 6),
            "requests": self.requests,
        }
