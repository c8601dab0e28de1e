"""A 1 Hz sampler of the workload's process tree (psutil) and, where present, its GPU (NVML)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import psutil

from elastico_core.profiling.gpu_probe import GpuProbe, GpuSample

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Sample:
    t: float  # wall clock
    cpu_cores: float  # cores busy (1.0 = one core fully), summed over the tree
    rss_mib: float  # resident memory of the tree
    gpu: GpuSample | None = None


@dataclass
class TreeSampler:
    """Samples every ``interval_s`` in a daemon thread until ``stop``; ``samples`` is safe to read after."""

    pid: int
    probe: GpuProbe | None = None
    interval_s: float = 1.0
    samples: list[Sample] = field(default_factory=list)
    _procs: dict[int, psutil.Process] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TreeSampler:
        self._tree()  # prime cpu_percent: the first reading of a process is always 0
        self._thread = threading.Thread(target=self._loop, name=f"sampler-{self.pid}", daemon=True)
        self._thread.start()
        return self

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return []
        live = []
        for p in procs:
            known = self._procs.get(p.pid)
            if known is None:
                try:
                    p.cpu_percent(None)
                except psutil.Error:
                    continue
                self._procs[p.pid] = known = p
            live.append(known)
        return live

    def sample_once(self) -> Sample | None:
        cpu, rss, pids = 0.0, 0.0, set()
        for p in self._tree():
            try:
                cpu += p.cpu_percent(None) / 100.0
                rss += p.memory_info().rss / MIB
                pids.add(p.pid)
            except psutil.Error:
                continue
        if not pids:
            return None
        gpu = self.probe.sample(pids) if self.probe is not None else None
        return Sample(time.time(), cpu, rss, gpu)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            s = self.sample_once()
            if s is not None:
                self.samples.append(s)

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return list(self.samples)

    def between(self, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples if start <= s.t <= end]
