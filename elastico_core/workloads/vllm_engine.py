"""The vLLM engine behind the inference entrypoint (GPU pods); imported only when vLLM is installed.

The knobs map one-to-one onto ``vllm.LLM`` engine arguments (``engine_kwargs``). Models are local: the
hub is switched off (``HF_HUB_OFFLINE=1``), so ``--model`` must be a folder or a model already in the
pod image's Hugging Face cache.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from elastico_core.workloads.cpu_engine import EngineConfig, Request, Result, Tick

# Hugging Face ids of Table 2's inference models (resolved from the local cache only).
VLLM_MODELS = {
    "deepseek-1.5b": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
    "qwen-1.7b": "Qwen/Qwen3-1.7B",
    "mistral-7b": "mistralai/Mistral-7B-v0.1",
    "llama-3-7b": "meta-llama/Meta-Llama-3-8B",
}


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def engine_kwargs(cfg: EngineConfig) -> dict[str, Any]:
    """``vllm.LLM`` / ``EngineArgs`` keyword arguments for one configuration."""
    return {
        "max_num_seqs": cfg.max_num_seqs,
        "max_model_len": cfg.max_model_len,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "enable_prefix_caching": cfg.prefix_caching,
    }


class VllmEngine:
    """``vllm.LLM`` over chunks of the shard, so results are written and progress reported per chunk."""

    def __init__(self, model: str, cfg: EngineConfig, seed: int = 0, chunk: int = 256) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from vllm import LLM

        self.cfg = cfg
        self.chunk = chunk
        self.llm = LLM(model=model, seed=seed, **engine_kwargs(cfg))
        self.slots = cfg.max_num_seqs
        self.prefill_tokens = 0
        self.cached_tokens = 0

    def run(self, requests: Iterable[Request], on_tick: Callable[[Tick], None] | None = None) -> Iterator[Result]:
        from vllm import SamplingParams

        batch: list[Request] = []
        for req in requests:
            batch.append(req)
            if len(batch) >= self.chunk:
                yield from self._generate(batch, SamplingParams, on_tick)
                batch = []
        if batch:
            yield from self._generate(batch, SamplingParams, on_tick)

    def _generate(
        self, batch: list[Request], sampling: Any, on_tick: Callable[[Tick], None] | None
    ) -> Iterator[Result]:
        params = [
            sampling(max_tokens=r.max_tokens, temperature=r.temperature, seed=r.seed, stop=[r.stop] if r.stop else None)
            for r in batch
        ]
        t0 = time.perf_counter()
        outs = self.llm.generate([r.prompt for r in batch], params, use_tqdm=False)
        dt = time.perf_counter() - t0
        results = []
        for req, out in zip(batch, outs, strict=True):
            gen = out.outputs[0]
            cached = int(getattr(out, "num_cached_tokens", 0) or 0)
            prompt_tokens = len(out.prompt_token_ids or [])
            self.prefill_tokens += prompt_tokens - cached
            self.cached_tokens += cached
            results.append(
                Result(
                    req.id,
                    req.prompt,
                    gen.text,
                    prompt_tokens,
                    len(gen.token_ids),
                    cached,
                    gen.finish_reason or "length",
                )
            )
        if on_tick is not None:
            on_tick(Tick(sum(r.output_tokens for r in results), dt, 0, self.prefill_tokens, self.cached_tokens))
        yield from results
