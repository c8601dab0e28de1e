"""Watch a traced step: every storage allocated and freed, what autograd saves, each operator's work.

``StepRecorder`` is a ``TorchDispatchMode`` below autograd, so it sees what a GPU would run: each
``aten`` operator after autograd and the composite decompositions, with its inputs and outputs (fake
tensors: sizes and dtypes only). From it come

* the allocation stream: a storage is allocated when an operator first returns it and freed when it
  dies (a weak-reference finaliser, the moment its last reference goes, as the caching allocator sees
  it), replayed later by ``allocator.replay``;
* FLOPs per operator, with the formulas of ``torch.utils.flop_counter`` (``flop_registry``: matrix
  products, convolutions, attention), so the total is what ``FlopCounterMode`` counts;
* the bytes each operator reads and writes (a written argument counts twice, an indexed read counts
  the rows it returns), and the kernels launched (operators that are not views or metadata);
* work grouped by arithmetic intensity (FLOP per byte, half-octave bins) and precision, enough to
  place each group under any GPU's roofline later without keeping every operator.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten
Event = tuple[int, int]  # (+bytes, id) allocation, (-1, id) free: the allocator replay's input

_NO_KERNEL = {
    aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default,
    aten.detach.default, aten.alias.default, aten.lift_fresh.default, aten._local_scalar_dense.default,
}  # fmt: skip
_CONVOLUTIONS = {aten.convolution, aten.convolution_backward, aten._convolution}
_INDEXED_READS = {aten.embedding.default, aten.index.Tensor, aten.index_select.default, aten.gather.default}
LOW_PRECISION = (torch.bfloat16, torch.float16)


def _cpu_flash_flops(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *a: Any, **k: Any) -> int:
    return int(sdpa_flop_count(query.shape, key.shape, value.shape))


def _cpu_flash_backward_flops(grad: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *a: Any, **k: Any) -> int:
    return int(sdpa_backward_flop_count(grad.shape, query.shape, key.shape, value.shape))


# the fused CPU attention kernel stands in for CUDA's (``cuda_paths``): count it as flop_counter counts those
EXTRA_FLOPS: dict[Any, Callable[..., int]] = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_flops,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward_flops,
}


def flops_of(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """FLOPs of one operator call by ``torch.utils.flop_counter``'s formulas (0 where it has none)."""
    packet = func._overloadpacket
    if packet in flop_registry:
        return int(flop_registry[packet](*args, **kwargs, out_val=out))
    extra = EXTRA_FLOPS.get(packet)
    return extra(*args, **kwargs) if extra is not None else 0


def intensity_bin(flops: float, nbytes: float) -> int:
    """Half-octave bin of FLOP per byte (bin b holds intensities in [2^(b/2), 2^((b+1)/2)))."""
    return math.floor(2.0 * math.log2(max(flops, 1.0) / max(nbytes, 1.0)))


@dataclass
class WorkBin:
    """Operators of one precision and intensity bin: their summed FLOPs, bytes and count."""

    flops: float = 0.0
    nbytes: float = 0.0
    ops: int = 0


@dataclass
class StepRecorder(TorchDispatchMode):
    """Records allocations, frees and per-operator work while active (see module doc)."""

    events: list[Event] = field(default_factory=list)
    live: int = 0
    peak: int = 0
    kernels: int = 0
    dispatched: int = 0  # every aten operator the host issues, views included
    fp32_convolutions: int = 0  # convolutions in FP32/TF32: cuDNN autotunes FFT engines for these
    flops: int = 0
    nbytes: float = 0.0
    work: dict[tuple[str, int], WorkBin] = field(default_factory=dict)
    _ids: weakref.WeakKeyDictionary[Any, int] = field(default_factory=weakref.WeakKeyDictionary)
    _next: int = 0

    def __post_init__(self) -> None:
        super().__init__()

    # ---- storages -----------------------------------------------------------------------------
    def track(self, t: torch.Tensor) -> None:
        """Count ``t``'s storage as allocated (once), and as freed when it dies."""
        st = t.untyped_storage()
        if st in self._ids:
            return
        ident, self._next = self._next, self._next + 1
        self._ids[st] = ident
        size = int(st.nbytes())
        self.events.append((size, ident))
        self.live += size
        self.peak = max(self.peak, self.live)
        weakref.finalize(st, self._freed, ident, size)

    def _freed(self, ident: int, size: int) -> None:
        self.live -= size
        self.events.append((-1, ident))

    def storage_id(self, t: torch.Tensor) -> int | None:
        return self._ids.get(t.untyped_storage())

    def reset_work(self) -> None:
        self.kernels, self.dispatched, self.fp32_convolutions = 0, 0, 0
        self.flops, self.nbytes, self.work = 0, 0.0, {}

    # ---- operators ----------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        for t in outs:
            self.track(t)
        if func.namespace == "prim":  # device and metadata queries: fake tensors' own, no host work on a GPU
            return out
        self.dispatched += 1
        if func in _NO_KERNEL or _is_view(func):
            return out
        self.kernels += 1
        if func._overloadpacket in _CONVOLUTIONS and _precision(args) == "tf32":
            self.fp32_convolutions += 1
        flops = flops_of(func, args, kwargs, out)
        nbytes = _bytes_moved(func, args, kwargs, outs)
        self.flops += flops
        self.nbytes += nbytes
        key = (_precision(args) if flops else "none", intensity_bin(flops, nbytes) if flops else 0)
        b = self.work.setdefault(key, WorkBin())
        b.flops += flops
        b.nbytes += nbytes
        b.ops += 1
        return out


def _is_view(func: Any) -> bool:
    """An operator whose outputs alias an input without writing it (view, transpose, expand...)."""
    rets = func._schema.returns
    return bool(rets) and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)


def _tensors(x: Any) -> Iterator[torch.Tensor]:
    for t in tree_flatten(x)[0]:
        if isinstance(t, torch.Tensor):
            yield t


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _bytes_moved(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outs: list[torch.Tensor]) -> float:
    """Bytes an operator reads and writes: inputs once, written inputs twice, fresh outputs once."""
    out_bytes = sum(_nbytes(t) for t in outs)
    if func in _INDEXED_READS:  # a lookup reads the rows it returns (and its indices), not the whole table
        return 2.0 * out_bytes + sum(_nbytes(t) for t in _tensors(args[1:]))
    total = 0.0
    written = False
    for i, arg in enumerate(func._schema.arguments):
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        for t in _tensors(value):
            w = arg.alias_info is not None and arg.alias_info.is_write
            written |= w
            total += _nbytes(t) * (2 if w else 1)
    return total if written else total + out_bytes


def _precision(args: tuple[Any, ...]) -> str:
    """``bf16`` when a matrix product runs in a 16-bit type (tensor cores at full rate), else ``tf32``."""
    for t in _tensors(args):
        if t.is_floating_point():
            return "bf16" if t.dtype in LOW_PRECISION else "tf32"
    return "tf32"
