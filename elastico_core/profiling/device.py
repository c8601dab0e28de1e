"""Choosing the device a profile is measured on: one GPU, or a set of CPU cores on a CPU-only machine."""

from __future__ import annotations

import psutil

from elastico_core.model.errors import SpecError
from elastico_core.profiling.gpu_probe import open_probe
from elastico_core.profiling.launcher import Device
from elastico_core.profiling.signature import parse_cpus


def idlest_core(sample_s: float = 0.3) -> int:
    """The allowed core that was least busy over a short sample (the CPU device when --cpus is auto)."""
    allowed = sorted(psutil.Process().cpu_affinity() or [0])
    load = psutil.cpu_percent(interval=sample_s, percpu=True)
    return min(allowed, key=lambda c: (load[c] if c < len(load) else 0.0, c))


def pick_device(cpus: str = "auto", gpu: str = "auto") -> Device:
    """``gpu``: auto (GPU 0 when NVML sees one), none, or an index. ``cpus``: auto (the idlest core) or a list."""
    index: int | None
    if gpu == "none":
        index = None
    elif gpu == "auto":
        probe = open_probe(0)
        index = 0 if probe is not None else None
        if probe is not None:
            probe.close()
    else:
        try:
            index = int(gpu)
        except ValueError:
            raise SpecError(f"want auto, none or a GPU index, got {gpu!r}", field="gpu") from None
        probe = open_probe(index)
        if probe is None:
            raise SpecError(f"no GPU {index} visible to NVML", field="gpu")
        probe.close()
    if cpus == "auto":
        cores = tuple(sorted(psutil.Process().cpu_affinity() or [0])) if index is not None else (idlest_core(),)
    else:
        cores = parse_cpus(cpus)
    return Device(cores, index)
