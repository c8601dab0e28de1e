"""Warm-up and measurement windows over running jobs (§4.1 steps ii-iii), alone or side by side."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from elastico_core.model.errors import SpecError
from elastico_core.model.launch import StepEvent
from elastico_core.model.workload import JobKind
from elastico_core.profiling.launcher import JobProcess
from elastico_core.profiling.sampler import Sample, TreeSampler
from elastico_core.profiling.stats import binned_throughput, per_second, throughput

POLL_S = 0.05
TAIL_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Windows:
    """Warm-up ends at ``warmup_iters`` iterations or ``warmup_s`` seconds, whichever comes first."""

    warmup_s: float = 30.0
    warmup_iters: int = 50
    measure_s: float = 60.0
    min_iters: int = 5  # the window stretches (up to ``max_stretch`` x) until it holds this many iterations
    max_stretch: float = 5.0
    startup_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        for name in ("warmup_s", "measure_s", "startup_timeout_s"):
            if getattr(self, name) < 0 or (name == "measure_s" and self.measure_s <= 0):
                raise SpecError(f"must be > 0, got {getattr(self, name)}", field=name.replace("_", "-"))


@dataclass(frozen=True, slots=True)
class Measurement:
    """What one job did inside the measurement window."""

    throughput: float  # samples/s (training) or generated tokens/s (inference)
    iterations: int
    start: float
    end: float
    steps: tuple[StepEvent, ...]
    samples: tuple[Sample, ...]
    cpu_cores: float  # mean cores busy over the window (CPU time / wall time)
    mem_mib: float  # peak memory the job reported (device allocator, or live bytes on CPU)
    params: int
    start_event: dict[str, object]
    prefix_hit_rate: float = math.nan  # inference: prompt tokens vLLM served from its prefix cache, in the window

    @property
    def engine(self) -> str:
        return str(self.start_event.get("engine") or "torch")

    @property
    def timeline(self) -> list[float]:
        return per_second(self.steps, self.start, self.end)


def window_hit_rate(points: list[tuple[float, float, float]], start: float, end: float) -> float:
    """Cached / all prompt tokens scheduled between ``start`` and ``end``, from cumulative (t, prefilled, cached)."""
    before = [p for p in points if p[0] < start]
    inside = [p for p in points if start <= p[0] <= end]
    if not inside:
        return math.nan
    _, p0, c0 = before[-1] if before else (start, 0.0, 0.0)
    _, p1, c1 = inside[-1]
    total = (p1 - p0) + (c1 - c0)
    return (c1 - c0) / total if total > 0 else math.nan


def _warm(job: JobProcess, w: Windows, now: float) -> bool:
    if job.first_step_wall is None:
        return False
    return len(job.steps) >= w.warmup_iters or now - job.first_step_wall >= w.warmup_s


def _inside(job: JobProcess, start: float, end: float) -> list[StepEvent]:
    return [s for s in job.steps if s.t - s.dt_s >= start and s.t <= end]


def measure(
    jobs: Sequence[JobProcess], samplers: Sequence[TreeSampler], w: Windows, *, drop_descheduled: bool = False
) -> list[Measurement]:
    """Wait until every job is warm, then measure all of them over one common window.

    ``drop_descheduled`` (a job alone on a CPU device) leaves out iterations during which another
    process took the core; never for a co-located pair, whose sharing is what is measured.
    Raises ``JobFailed`` if a job exits early and SpecError if one never starts. Does not stop the jobs.
    """
    t0 = time.time()
    while True:
        now = time.time()
        for job in jobs:
            job.poll()
            job.check_alive()
        if all(_warm(j, w, now) for j in jobs):
            break
        if now - t0 > w.startup_timeout_s + w.warmup_s:
            slow = [j.name for j in jobs if not _warm(j, w, now)]
            raise SpecError(
                f"no steady progress within {w.startup_timeout_s + w.warmup_s:.0f} s", where=f"workloads {slow}"
            )
        time.sleep(POLL_S)
    start = time.time()
    cpu0 = [j.cpu_seconds() for j in jobs]
    end = start + w.measure_s
    limit = start + w.measure_s * w.max_stretch
    while True:
        now = time.time()
        for job in jobs:
            job.poll()
            job.check_alive()
        if now >= end and (all(len(_inside(j, start, now)) >= w.min_iters for j in jobs) or now >= limit):
            break
        time.sleep(POLL_S)
    end = time.time()
    cpu1 = [j.cpu_seconds() for j in jobs]
    for sampler in samplers:  # one reading at the window's end, so even a 1 s window has a sample
        last = sampler.sample_once()
        if last is not None:
            sampler.samples.append(last)
    # a GPU job reports an iteration when the device has finished it (CUDA events, no per-step sync):
    # the iterations that ended inside the window may arrive a little after it
    tail_until = time.time() + TAIL_TIMEOUT_S
    while time.time() < tail_until and any((j.steps[-1].t if j.steps else 0.0) < end for j in jobs):
        for job in jobs:
            job.poll()
            job.check_alive()
        time.sleep(POLL_S)
    out = []
    for job, sampler, c0, c1 in zip(jobs, samplers, cpu0, cpu1, strict=True):
        steps = _inside(job, start, end)
        kind = job.spec.workload.kind
        solo = drop_descheduled
        tput = throughput(steps, solo=solo) if kind is JobKind.TRAIN else binned_throughput(steps, solo=solo)
        mems = [s.mem_mib for s in job.steps if not math.isnan(s.mem_mib)]
        ev = job.start_event or {}
        out.append(
            Measurement(
                throughput=tput,
                iterations=len(steps),
                start=start,
                end=end,
                steps=tuple(steps),
                samples=tuple(sampler.between(start, end + 1.0)),
                cpu_cores=max(0.0, (c1 - c0) / max(end - start, 1e-9)),
                mem_mib=max(mems) if mems else math.nan,
                params=int(ev.get("params", 0) or 0),  # type: ignore[call-overload]
                start_event=dict(ev),
                prefix_hit_rate=window_hit_rate(job.prompt_tokens, start, end),
            )
        )
    return out
