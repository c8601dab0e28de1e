"""Process set-up shared by the entrypoints: threads, device, memory caps, out-of-memory, step timing."""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

MIB = 1024 * 1024
T = TypeVar("T")
_cpu_cap: list[int] = []  # the RLIMIT_DATA this process set for its budget, if any


def set_threads(threads: int | None) -> None:
    """Intra-op threads (``ELASTICO_TORCH_THREADS``); one inter-op thread so a job uses what it is given."""
    if not threads:
        return
    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # can only be set before the first parallel region of the process
        torch.set_num_interop_threads(1)


def pick_device(local_rank: int = 0) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def configure_backends(device: torch.device) -> None:
    """What real training jobs switch on: TF32 for FP32 matmuls (cuDNN convolutions use it by default)
    and cuDNN's autotuner, which picks the fastest convolution kernels for the fixed shapes of a run."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.benchmark = True


def _vm_data_mib() -> float | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def apply_memory_cap(device: torch.device, fraction: float | None, budget_mib: int | None) -> float | None:
    """Cap the job's memory to its budget M_j (§4.2). Returns the fraction of the device's memory set.

    CUDA: the caching allocator's per-process fraction (``ELASTICO_MEMORY_FRACTION`` wins, else the
    budget over the device's memory); ``PYTORCH_CUDA_ALLOC_CONF`` is read by torch itself. CPU: the
    process's data segment (``RLIMIT_DATA``, which counts heap and private anonymous mappings) is capped
    at what it holds now plus the budget, so the allocator itself fails past it, as a GPU's would.
    """
    if device.type == "cuda":
        if fraction is None and budget_mib:
            total = torch.cuda.get_device_properties(device).total_memory / MIB
            fraction = min(1.0, budget_mib / total)
        if fraction is not None:
            torch.cuda.set_per_process_memory_fraction(fraction, device)
        return fraction
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / MIB
    budget = budget_mib if budget_mib else (fraction * total if fraction is not None else None)
    held = _vm_data_mib()
    if budget is None or held is None:
        return None
    limit = int((held + budget) * MIB)
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))
    except (ValueError, OSError):  # a hard limit below ours: keep the stricter one
        return None
    _cpu_cap[:] = [limit]
    return budget / total


CPU_ALLOCATION_FAILURES = (
    "DefaultCPUAllocator: can't allocate memory",
    "could not create a primitive",  # oneDNN could not allocate its scratchpad
    "Cannot allocate memory",
)


def is_out_of_memory(exc: BaseException) -> bool:
    """A device allocator (CUDA) or the CPU allocator ran out of memory.

    Under a CPU memory cap every allocation can fail, including oneDNN's own (which reports that it
    "could not create a primitive"): those count as out of memory only while this process's cap is set.
    """
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    if not isinstance(exc, RuntimeError):
        return False
    text = str(exc)
    if "CUDA out of memory" in text or CPU_ALLOCATION_FAILURES[0] in text:
        return True
    return bool(_cpu_cap) and any(marker in text for marker in CPU_ALLOCATION_FAILURES)


@dataclass(frozen=True, slots=True)
class Timed(Generic[T]):
    """An iteration as the device finished it: its payload, wall-clock end, seconds since the last end, loss."""

    item: T
    t: float
    dt_s: float
    loss: float


class StepTimer(Generic[T]):
    """Iteration times as the device saw them, without making the host wait for the device each step.

    On a GPU every iteration records a CUDA event and copies its loss into pinned host memory
    asynchronously; an iteration is reported once its event has completed (a non-blocking query), with
    its end time on the device's clock mapped to the wall clock through one anchor taken at the start.
    The host runs ahead by at most what the launch queue holds, so reports lag by an iteration or two;
    ``drain`` waits for the rest. On a CPU an iteration is finished when the call returns.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._pending: deque[tuple[T, torch.cuda.Event, torch.Tensor]] = deque()
        self._last = time.time()
        if self.cuda:
            self._anchor = torch.cuda.Event(enable_timing=True)
            self._anchor.record()
            self._anchor.synchronize()
            self._anchor_wall = self._last = time.time()

    def end(self, item: T, loss: torch.Tensor) -> list[Timed[T]]:
        if not self.cuda:
            now = time.time()
            out = [Timed(item, now, now - self._last, float(loss))]
            self._last = now
            return out
        host = torch.empty((), dtype=torch.float32, pin_memory=True)
        host.copy_(loss.detach().float(), non_blocking=True)
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._pending.append((item, event, host))
        return self._collect(block=False)

    def drain(self) -> list[Timed[T]]:
        return self._collect(block=True)

    def _collect(self, *, block: bool) -> list[Timed[T]]:
        out: list[Timed[T]] = []
        while self._pending:
            item, event, host = self._pending[0]
            if block:
                event.synchronize()
            elif not event.query():
                break
            self._pending.popleft()
            t = self._anchor_wall + self._anchor.elapsed_time(event) / 1e3
            out.append(Timed(item, t, t - self._last, float(host)))
            self._last = t
        return out


def amp_dtype(device: torch.device) -> torch.dtype:
    """BF16 on CPU and on GPUs that have it (no loss scaling needed), FP16 elsewhere."""
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return torch.float16
    return torch.bfloat16


@dataclass(frozen=True, slots=True)
class Dist:
    """This process's place in a data-parallel group (torchrun-style environment)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> Dist:
        return cls(
            int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))
        )

    @property
    def is_main(self) -> bool:
        return self.rank == 0
