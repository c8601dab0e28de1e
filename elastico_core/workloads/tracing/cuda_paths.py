"""Where CUDA's eager kernels keep other tensors than the CPU build's, take CUDA's path while tracing.

The tracer runs on PyTorch's CPU build (autograd on fake CUDA tensors needs a CUDA build: the engine
asks the device for a stream). For the operators our workloads use, the CPU build's composite
implementations save different tensors for backward than the kernels a GPU runs, so these are routed
as ``aten`` routes them on CUDA, for the duration of a trace only:

* ``dropout``: CUDA's ``at::dropout`` calls ``native_dropout``, which keeps a 1-byte mask; the CPU
  composite multiplies by a noise tensor of the input's dtype (4 bytes a value in FP32).
* ``scaled_dot_product_attention``: on a GPU the fused flash / memory-efficient kernels run (also with
  dropout and masks) and save the inputs, the output and the log-sum-exp; the CPU build falls back to
  the math path with dropout, which saves the B x heads x S x S probabilities. The CPU build's own fused
  flash kernel saves what the GPU kernels save.
* recurrent layers: oneDNN's RNN primitive keeps a workspace in its own layout; with it off, ATen's
  recurrence keeps each step's gates and cell state, which is what cuDNN keeps in its reserve space.
* optimizers: the zoo asks for the fused (single-kernel) Adam update where parameters are on a GPU
  (``zoo.base.fused``); ``fused_like`` builds that optimizer for the traced parameters.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator

import torch
from torch import Tensor

aten = torch.ops.aten


def _dropout(x: Tensor, p: float, train: bool) -> Tensor:
    if not train or p == 0 or x.numel() == 0:
        return x
    return torch.native_dropout(x, p, train)[0]


def _sdpa(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    out = aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
    )
    return out[0]  # type: ignore[no-any-return]


@contextlib.contextmanager
def cuda_dispatch() -> Iterator[None]:
    """Route dropout, attention and recurrences as CUDA does, until the block ends."""
    lib = torch.library.Library("aten", "IMPL")
    with contextlib.ExitStack() as stack:
        stack.callback(lib._destroy)
        with _quiet_override():
            lib.impl("dropout", _dropout, "CompositeImplicitAutograd")
            lib.impl("scaled_dot_product_attention", _sdpa, "CompositeImplicitAutograd")
        with _quiet_override():
            stack.enter_context(torch.backends.mkldnn.flags(enabled=False))
        yield


@contextlib.contextmanager
def _quiet_override() -> Iterator[None]:
    """``torch.library`` warns that a kernel is overridden: here that is the point."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Overriding a previously registered kernel.*")
        warnings.filterwarnings("ignore", message=".*Warning only once for all operators.*")
        warnings.filterwarnings("ignore", message=".*TF32 acceleration on top of oneDNN.*")
        yield


def fused_like(opt: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The same optimizer over the same parameters with the fused update, as the zoo makes it on a GPU."""
    accepted = inspect.signature(type(opt).__init__).parameters
    hyper = {k: v for k, v in opt.defaults.items() if k in accepted}
    groups = [{**g, "fused": True, "foreach": None} for g in opt.param_groups]
    return type(opt)(groups, **{**hyper, "fused": True, "foreach": None})
