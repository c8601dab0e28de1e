"""What one simulation returns: per-job records, piecewise-constant time series, and run statistics."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from elastico_core.sim.queues import QueueTrace


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job's outcome. Times in seconds from the trace origin; NaN where it never happened."""

    job_id: str
    kind: str
    workload: str
    user: str
    submit_s: float
    dp: int  # GPUs of the default configuration
    first_start_s: float
    finish_s: float
    work: float  # workload unit x s
    norm_work: float  # default GPU-seconds
    work_done: float
    floor: float
    default_throughput: float
    held_s: float  # time it held GPUs (running or changing)
    changing_s: float  # time it spent in switches, migrations, resumes and crash loops
    changing_gpu_s: float  # the same in GPU-seconds
    switches: int
    migrations: int
    preemptions: int
    ooms: int
    checkpoint_resumes: int
    final_knobs: str

    @property
    def finished(self) -> bool:
        return not math.isnan(self.finish_s)

    @property
    def jct_s(self) -> float:
        return self.finish_s - self.submit_s

    @property
    def queue_s(self) -> float:
        return self.first_start_s - self.submit_s

    @property
    def mean_throughput(self) -> float:
        """Work over the time it held GPUs: what the job experienced while admitted."""
        return self.work_done / self.held_s if self.held_s > 0 else math.inf

    @property
    def met_floor(self) -> bool:
        return self.mean_throughput >= self.floor * (1 - 1e-9)


@dataclass(frozen=True, slots=True)
class Series:
    """Cluster state after each change: value ``[i]`` holds on ``[t[i], t[i+1])``."""

    t: np.ndarray
    sm: np.ndarray  # sum over GPUs of SM share in use (0..gpus)
    mem: np.ndarray  # sum over GPUs of real device memory held, MiB
    busy: np.ndarray  # GPUs holding at least one job
    rate: np.ndarray  # useful work per second, default GPU-seconds per second
    running: np.ndarray  # jobs placed
    pending: np.ndarray  # jobs waiting

    def mean(self, name: str, start: float, end: float) -> float:
        """Time average of one series over [start, end]."""
        if end <= start or len(self.t) == 0:
            return 0.0
        v = getattr(self, name)
        edges = np.append(self.t, max(end, float(self.t[-1])))
        lo = np.clip(edges[:-1], start, end)
        hi = np.clip(edges[1:], start, end)
        return float(np.sum(v * (hi - lo)) / (end - start))

    def integral(self, name: str, start: float, end: float) -> float:
        return self.mean(name, start, end) * (end - start)


@dataclass(frozen=True, slots=True)
class SimResult:
    policy: str
    trace: str
    gpus: int
    seed: int
    usable_mem_mib: float  # per GPU, less M_sys
    window_s: float  # measurement window [0, window]: the trace's last submission (or the makespan)
    end_s: float  # when the simulation stopped
    jobs: tuple[JobRecord, ...]
    series: Series
    decide_ms: tuple[float, ...]  # wall-clock latency of each policy call
    decide_at: tuple[float, ...]  # simulated time of each policy call
    events: int  # events handled (stale finish events included)
    stale_events: int
    wall_s: float
    truncated: bool  # stopped at max_time_s with jobs unfinished
    event_log: tuple[tuple[float, str, str], ...] = field(default=())
    notes: tuple[str, ...] = field(default=())
    queues: QueueTrace | None = None  # on a cluster with queues: what each held and asked over time

    def deterministic_key(self) -> tuple[object, ...]:
        """Everything except wall-clock measurements: equal for two runs with one seed."""
        return (
            self.policy, self.trace, self.gpus, self.seed, self.window_s, self.end_s, self.jobs,
            tuple(tuple(np.asarray(getattr(self.series, n)).tolist()) for n in ("t", "sm", "mem", "busy", "rate", "running", "pending")),
            self.decide_at, self.events, self.stale_events, self.truncated, self.event_log,
        )
