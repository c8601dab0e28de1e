"""Trace a vLLM workload's model from its config: weights, KV cache per token and FLOPs per token.

The models the inference workloads serve are Hugging Face checkpoints whose ``config.json`` is public;
the figures below are copied from those files (nothing is fetched). ``transformers`` builds each model
on the meta device from its config, so a 8 B-parameter Llama costs no memory: the parameter count and
the BF16 weights are the model's own, the KV cache per token is ``2 x layers x kv_heads x head_dim x
2 B`` (what vLLM allocates per token and layer for K and V in BF16), and one forward pass under
``torch.utils.flop_counter.FlopCounterMode`` gives FLOPs per token at two context lengths (the
difference is attention's share, which grows with context).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from elastico_core.model.errors import SpecError
from elastico_core.model.traced import InferTrace
from elastico_core.workloads.tracing.digest import source_digest

BF16_BYTES = 2
CONTEXTS = (128, 256)  # tokens of the two traced forward passes

# the public config.json of each model (the fields that shape it), and the transformers class that builds it
MODEL_CONFIGS: Mapping[str, tuple[str, str, Mapping[str, Any]]] = MappingProxyType({
    "deepseek-1.5b": ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "Qwen2", dict(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
        num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=False, max_position_embeddings=131072)),
    "qwen-1.7b": ("Qwen/Qwen3-1.7B", "Qwen3", dict(
        hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True,
        max_position_embeddings=40960)),
    "mistral-7b": ("mistralai/Mistral-7B-v0.1", "Mistral", dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=32000, tie_word_embeddings=False, max_position_embeddings=32768)),
    "llama-3-7b": ("meta-llama/Meta-Llama-3-8B", "Llama", dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False, max_position_embeddings=8192,
        rope_theta=500000.0)),
})  # fmt: skip


def _model_classes(arch: str) -> tuple[type, type]:
    import transformers

    return getattr(transformers, f"{arch}Config"), getattr(transformers, f"{arch}ForCausalLM")


def inference_digest(workload: str) -> str:
    import transformers

    _, arch, cfg = MODEL_CONFIGS[workload]
    return source_digest((__name__,), arch, repr(sorted(cfg.items())), transformers.__version__, torch.__version__)


def _forward_flops(model: torch.nn.Module, tokens: int) -> int:
    ids = torch.zeros(1, tokens, dtype=torch.long, device="meta")
    mask = torch.ones(1, tokens, dtype=torch.long, device="meta")  # given, so no data-dependent check runs
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(input_ids=ids, attention_mask=mask, use_cache=False)
    return int(counter.get_total_flops())


def trace_inference(workload: str) -> InferTrace:
    """The model's own figures for one inference workload of the catalog."""
    if workload not in MODEL_CONFIGS:
        raise SpecError(f"no model config for {workload!r} (known: {', '.join(MODEL_CONFIGS)})", field="workload")
    t0 = time.perf_counter()
    model_id, arch, fields = MODEL_CONFIGS[workload]
    config_cls, model_cls = _model_classes(arch)
    config = config_cls(**fields, torch_dtype=torch.bfloat16, attn_implementation="eager")
    with torch.device("meta"):
        model = model_cls(config).to(torch.bfloat16)
    model.eval()
    params = sum(p.numel() for p in model.parameters())
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
    kv_heads = int(config.num_key_value_heads)
    layers = int(config.num_hidden_layers)
    short, long = (_forward_flops(model, n) for n in CONTEXTS)
    # f(n) = n (a + b n / 2) for n tokens of causal attention: per token a at no context, b per context token
    per_context = 2.0 * (long / CONTEXTS[1] - short / CONTEXTS[0]) / (CONTEXTS[1] - CONTEXTS[0])
    per_token = short / CONTEXTS[0] - per_context * CONTEXTS[0] / 2.0
    return InferTrace(
        workload=workload,
        model=model_id,
        architecture=f"{arch}ForCausalLM",
        digest=inference_digest(workload),
        params=params,
        weights_bytes=weights,
        kv_bytes_per_token=2 * layers * kv_heads * head_dim * BF16_BYTES,
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        hidden=int(config.hidden_size),
        vocab=int(config.vocab_size),
        flops_per_token=round(per_token),
        attention_flops_per_token_per_context=round(per_context, 3),
        trace_s=round(time.perf_counter() - t0, 3),
        traced_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
