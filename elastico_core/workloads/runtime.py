"""Process set-up shared by the entrypoints: threads, device, CUDA memory caps, peak-memory readings."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

import psutil
import torch

MIB = 1024 * 1024


def set_threads(threads: int | None) -> None:
    """Intra-op threads (``ELASTICO_TORCH_THREADS``); one inter-op thread so a job uses what it is given."""
    if not threads:
        return
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # can only be set before the first parallel region of the process
        pass


def pick_device(local_rank: int = 0) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def apply_memory_cap(device: torch.device, fraction: float | None, budget_mib: int | None) -> float | None:
    """Cap the CUDA caching allocator (§4.2); ``PYTORCH_CUDA_ALLOC_CONF`` is read by torch itself.

    ``ELASTICO_MEMORY_FRACTION`` wins; else the budget over the device's memory. Returns the fraction set.
    """
    if device.type != "cuda":
        return None
    if fraction is None and budget_mib:
        total = torch.cuda.get_device_properties(device).total_memory / MIB
        fraction = min(1.0, budget_mib / total)
    if fraction is not None:
        torch.cuda.set_per_process_memory_fraction(fraction, device)
    return fraction


def amp_dtype(device: torch.device) -> torch.dtype:
    """BF16 on CPU and on GPUs that have it (no loss scaling needed), FP16 elsewhere."""
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return torch.float16
    return torch.bfloat16


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / MIB


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


@dataclass(frozen=True, slots=True)
class MemoryMeter:
    """Peak memory of the job: CUDA's allocator peak on a GPU; on CPU the peak RSS above ``base_mib``.

    ``base_mib`` is the RSS before the model is built (interpreter and libraries), so the CPU figure is
    what the job itself holds at its peak: weights, gradients, optimizer state, activations, batches.
    """

    device: torch.device
    base_mib: float

    @classmethod
    def start(cls, device: torch.device) -> MemoryMeter:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        return cls(device, rss_mib())

    def peak_mib(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_reserved(self.device) / MIB
        return max(0.0, peak_rss_mib() - self.base_mib)


@dataclass(frozen=True, slots=True)
class Dist:
    """This process's place in a data-parallel group (torchrun-style environment)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> Dist:
        return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0)))

    @property
    def is_main(self) -> bool:
        return self.rank == 0
