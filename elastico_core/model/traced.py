"""What tracing a workload's code yields: memory parts and work per configuration, device-independent.

A training trace is one configuration (micro-batch, checkpointing, AMP) of one workload at one scale,
read off a traced training step (``workloads.tracing``); an inference trace is one vLLM model's
weights, KV cache per token and FLOPs per token, read off its config. Both carry the digest of the code
they were traced from, so a change to that code makes them stale.
"""

from __future__ import annotations

from dataclasses import dataclass

TRACED = "traced"  # the ``source`` of every cached trace


@dataclass(frozen=True, slots=True)
class WorkGroup:
    """Operators of one precision and one arithmetic-intensity bin, summed."""

    precision: str  # "tf32" (FP32 matrix products, TF32 tensor cores), "bf16", or "none" (no FLOPs counted)
    flops: float
    nbytes: float  # bytes read and written
    ops: int


@dataclass(frozen=True, slots=True)
class TrainTrace:
    """One training configuration's memory parts (bytes, one GPU, dp = 1) and work per iteration."""

    workload: str
    micro_batch: int
    checkpointing: bool
    amp: bool
    scale: str
    digest: str  # sha256 of the workload's code (and torch's version), 16 hex digits
    torch_version: str
    params: int
    samples: int  # samples one iteration processes (environment steps for PPO)
    weights_bytes: int  # parameters and buffers
    gradients_bytes: int
    optimizer_bytes: int
    batch_bytes: int
    activations_bytes: int  # held between forward and backward (the most over an iteration's backward calls)
    saved_bytes: int  # of which autograd saved outside checkpointed blocks (saved-tensor hooks)
    peak_allocated_bytes: int  # live tensors at the peak of a steady-state iteration
    first_step_peak_bytes: int  # the first iteration (no optimizer state or gradients yet)
    reserved_bytes: int  # what the CUDA caching allocator reserves for both iterations (replayed)
    flops: int  # per iteration, torch.utils.flop_counter's count
    bytes_moved: float  # per iteration, read + written by all kernels
    kernels: int  # operators that launch a kernel, per iteration
    dispatched: int  # operators the host issues per iteration (views and metadata too): host-side work
    fp32_convolutions: int  # convolutions in FP32 (TF32) per iteration, which cuDNN autotunes with FFT engines
    work: tuple[WorkGroup, ...]
    trace_s: float
    traced_at: str
    source: str = TRACED

    @property
    def knobs_key(self) -> tuple[int, bool, bool]:
        return (self.micro_batch, self.checkpointing, self.amp)

    @property
    def other_bytes(self) -> int:
        """Temporaries at the peak: what is live then besides state, batch and kept activations."""
        parts = self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.batch_bytes + self.activations_bytes
        return max(0, self.peak_allocated_bytes - parts)


@dataclass(frozen=True, slots=True)
class InferTrace:
    """One vLLM model: weights and KV cache per token (BF16) and FLOPs of one token, from its config."""

    workload: str
    model: str  # the Hugging Face model id whose config was read
    architecture: str
    digest: str
    params: int
    weights_bytes: int
    kv_bytes_per_token: int  # K and V of every layer, all KV heads
    layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int
    flops_per_token: int  # one token's forward pass at a short context (matrix products)
    attention_flops_per_token_per_context: float  # extra FLOPs per token for each token of context
    trace_s: float
    traced_at: str
    source: str = TRACED
