"""Process set-up shared by the entrypoints: threads, device, CUDA memory caps, peak-memory readings."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

MIB = 1024 * 1024


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
