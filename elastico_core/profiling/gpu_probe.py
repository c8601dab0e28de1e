"""GPU counters through NVIDIA NVML (``pynvml`` from nvidia-ml-py), sampled at 1 s by the profiler.

Where the GPU supports GPM (Hopper and later) the counters are DCGM's profiling fields: SM active,
SM occupancy, DRAM bandwidth and tensor activity. Elsewhere NVML's utilisation rates stand in: the
fraction of time a kernel ran (for SM active) and the fraction of time memory was read or written (for
DRAM active); occupancy and tensor activity are then unknown (NaN). Process memory comes from NVML's
per-process accounting. ``open_probe`` returns None on a machine without NVML or GPU.

A measurement window calls ``begin`` at its start and ``sample`` at its end: GPM metrics are then the
device's activity over exactly that window (GPM computes them between two samples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

MIB = 1024 * 1024
NAN = math.nan


@dataclass(frozen=True, slots=True)
class GpuSample:
    sm_active: float = NAN  # fractions 0..1
    sm_occupancy: float = NAN
    dram_active: float = NAN
    tensor_active: float = NAN
    used_mib: float = NAN  # device memory used by all processes
    proc_mib: float = NAN  # device memory used by the watched processes


class GpuProbe(Protocol):
    """What the profiler needs from a GPU; ``sample`` is called once per second."""

    name: str
    total_mib: float
    driver: str

    def begin(self) -> None: ...

    def sample(self, pids: set[int]) -> GpuSample: ...

    def close(self) -> None: ...


class NvmlProbe:
    """NVML on one device; GPM metrics over consecutive samples where supported."""

    def __init__(self, nvml: Any, index: int) -> None:
        self.nvml = nvml
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = nvml.nvmlDeviceGetName(self.handle)
        self.name = name.decode() if isinstance(name, bytes) else str(name)
        self.total_mib = nvml.nvmlDeviceGetMemoryInfo(self.handle).total / MIB
        driver = nvml.nvmlSystemGetDriverVersion()
        self.driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        self._gpm_prev: Any = None
        try:
            self.gpm = bool(nvml.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice)
        except Exception:  # older driver or GPU: no GPM
            self.gpm = False

    def begin(self) -> None:
        """Start a window: the next ``sample`` reports GPM metrics from now on."""
        if not self.gpm:
            return
        nv = self.nvml
        try:
            cur = nv.nvmlGpmSampleAlloc()
            nv.nvmlGpmSampleGet(self.handle, cur)
        except Exception:
            self.gpm = False
            return
        if self._gpm_prev is not None:
            nv.nvmlGpmSampleFree(self._gpm_prev)
        self._gpm_prev = cur

    def _gpm_sample(self) -> tuple[float, float, float, float] | None:
        nv = self.nvml
        cur = nv.nvmlGpmSampleAlloc()
        nv.nvmlGpmSampleGet(self.handle, cur)
        prev, self._gpm_prev = self._gpm_prev, cur
        if prev is None:
            return None
        ids = (nv.NVML_GPM_METRIC_SM_UTIL, nv.NVML_GPM_METRIC_SM_OCCUPANCY, nv.NVML_GPM_METRIC_DRAM_BW_UTIL,
               nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL)  # fmt: skip
        req = nv.c_nvmlGpmMetricsGet_t()
        req.version = nv.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(ids)
        req.sample1, req.sample2 = prev, cur
        for i, metric in enumerate(ids):
            req.metrics[i].metricId = metric
        nv.nvmlGpmMetricsGet(req)
        nv.nvmlGpmSampleFree(prev)
        values = [req.metrics[i].value / 100.0 if req.metrics[i].nvmlReturn == 0 else NAN for i in range(len(ids))]
        return values[0], values[1], values[2], values[3]

    def sample(self, pids: set[int]) -> GpuSample:
        nv = self.nvml
        mem = nv.nvmlDeviceGetMemoryInfo(self.handle)
        proc = NAN
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(self.handle)
            mine = [p.usedGpuMemory for p in procs if p.pid in pids and p.usedGpuMemory is not None]
            proc = sum(mine) / MIB if mine else NAN
        except Exception:  # per-process accounting unavailable (containers without the host pid namespace)
            pass
        if self.gpm:
            try:
                gpm = self._gpm_sample()
            except Exception:
                gpm, self.gpm = None, False
            if gpm is not None:
                return GpuSample(*gpm, used_mib=mem.used / MIB, proc_mib=proc)
        util = nv.nvmlDeviceGetUtilizationRates(self.handle)
        return GpuSample(
            sm_active=util.gpu / 100.0, dram_active=util.memory / 100.0, used_mib=mem.used / MIB, proc_mib=proc
        )

    def close(self) -> None:
        try:
            if self._gpm_prev is not None:
                self.nvml.nvmlGpmSampleFree(self._gpm_prev)
            self.nvml.nvmlShutdown()
        except Exception:
            pass


def open_probe(index: int = 0) -> NvmlProbe | None:
    """NVML on GPU ``index``, or None where there is no NVML library or no such GPU."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() <= index:
            pynvml.nvmlShutdown()
            return None
        return NvmlProbe(pynvml, index)
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
