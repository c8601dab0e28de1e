"""Peak memory of a job, measured honestly on both device kinds.

* CUDA: the caching allocator's peak (``torch.cuda.max_memory_reserved``) — what the device must hold.
* CPU: glibc's count of bytes in live allocations (``mallinfo2``: in-use heap plus mmapped blocks),
  sampled in forward/backward hooks of every module, including the recomputation that activation
  checkpointing runs during backward. It counts what the job's tensors occupy, not RSS, which the
  allocator's free lists and lazily returned pages blur. The figure is relative to the bytes live
  before the model was built (interpreter and libraries). Without glibc it falls back to peak RSS.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
from collections.abc import Callable

import torch
from torch import nn

MIB = 1024 * 1024
SAMPLE_FIRST, SAMPLE_EVERY = 5, 10  # probe the first iterations, then every tenth (hooks cost ~µs)


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _live_bytes_reader() -> Callable[[], int] | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        fn = libc.mallinfo2
    except (OSError, AttributeError):  # not glibc, or glibc < 2.33
        return None
    fn.restype = _MallInfo2

    def read() -> int:
        info = fn()
        return int(info.uordblks + info.hblkhd)

    return read


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class MemoryMeter:
    """``peak_mib()`` after any number of iterations; ``attach`` the model's modules first on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.active = True
        self._read = _live_bytes_reader() or _peak_rss_bytes
        self.method = (
            "cuda-reserved"
            if device.type == "cuda"
            else ("mallinfo2" if self._read is not _peak_rss_bytes else "peak-rss")
        )
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        self.base = self._read()
        self.peak = self.base

    def sample(self, *_: object) -> None:
        if self.active:
            value = self._read()
            if value > self.peak:
                self.peak = value

    def attach(self, module: nn.Module) -> None:
        """Sample before and after every leaf module runs forward, and as each parameter's gradient lands."""
        if self.device.type == "cuda":
            return
        for m in module.modules():
            if not any(True for _ in m.children()):
                m.register_forward_pre_hook(self._pre)
                m.register_forward_hook(self._post)
        for p in module.parameters():
            if p.requires_grad:
                p.register_hook(self._grad)

    def _pre(self, module: nn.Module, args: object) -> None:
        self.sample()

    def _post(self, module: nn.Module, args: object, out: object) -> None:
        self.sample()

    def _grad(self, grad: torch.Tensor) -> None:
        self.sample()

    def at_step(self, step: int) -> None:
        """Decide whether the coming iteration is probed (keeps the hooks' cost off most iterations)."""
        self.active = step < SAMPLE_FIRST or step % SAMPLE_EVERY == 0

    def peak_mib(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_reserved(self.device) / MIB
        self.sample() if self.active else None
        return max(0.0, (self.peak - self.base) / MIB)
