"""Measurement windows over live jobs, and the interleaved protocol that makes a pair's figures comparable.

A window is a stretch of wall-clock time during which some jobs run and the others are paused
(SIGSTOP). Each running job's throughput over the window comes from the iterations it finished
entirely inside it (their samples over their time), the device's counters from NVML/GPM sampled at
the window's two ends, CPU use from the process tree's CPU time.

A co-located pair is measured by interleaving, with both processes alive all along: A alone (B
paused, still holding its memory), B alone, A+B together, repeated (at least three times, the order
rotated so drift and warm-up favour no window). Each repeat gives each side a slowdown from windows
minutes, not hours, apart under the same conditions: solo / co-located throughput. The pair's label
is the median over repeats, with its min and max. Solo figures measured at another time (the store)
are not comparable with a pair's: a pair measured that way reported co-located throughputs *above*
solo ones.

Runs next to the device: standard library and psutil only (through the launcher).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import psutil

from elastico_core.model.errors import SpecError
from elastico_core.model.launch import StepEvent
from elastico_core.profiling.gpu_probe import GpuProbe, GpuSample
from elastico_core.profiling.launcher import JobProcess

POLL_S = 0.05
SUSPECT_BELOW = 0.97  # a median slowdown below this is a measurement error, not a label


@dataclass(frozen=True, slots=True)
class WindowConfig:
    """How long a window lasts and how a pair is interleaved."""

    window_s: float = 3.0
    settle_s: float = 0.5  # after pausing/resuming: a paused job's queued device work drains
    repeats: int = 3
    min_iters: int = 3  # a window stretches (up to ``max_stretch`` x) until each running job has this many
    max_stretch: float = 5.0
    tail_timeout_s: float = 10.0  # iterations are reported when the device finishes them: wait for the last

    def __post_init__(self) -> None:
        if not self.window_s > 0:
            raise SpecError(f"must be > 0, got {self.window_s}", field="window-s")
        if self.repeats < 1:
            raise SpecError(f"must be >= 1, got {self.repeats}", field="repeats")


@dataclass(frozen=True, slots=True)
class JobWindow:
    """What one running job did inside one window."""

    throughput: float  # samples (or tokens) per second; NaN without a complete iteration
    iterations: int
    cpu_cores: float
    rss_mib: float
    mem_mib: float  # the job's own peak device memory (allocator) so far
    steps: tuple[StepEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class Window:
    begin: float
    end: float
    jobs: dict[str, JobWindow]  # by the job's label
    gpu: GpuSample | None  # the device over the window (all processes on it)


def inside(steps: Sequence[StepEvent], begin: float, end: float) -> list[StepEvent]:
    """Iterations that started and ended inside [begin, end] (one spanning a pause is never counted)."""
    return [s for s in steps if s.t - s.dt_s >= begin and s.t <= end]


def window_throughput(steps: Sequence[StepEvent]) -> float:
    """Work over time of the iterations in a window: sum(n) / sum(dt) (a mean of ratios overweights short steps)."""
    timed = [s for s in steps if s.dt_s > 0]
    total = sum(s.dt_s for s in timed)
    return sum(s.n for s in timed) / total if total > 0 else math.nan


def _tree_pids(job: JobProcess) -> set[int]:
    try:
        root = psutil.Process(job.pid)
        return {root.pid, *(c.pid for c in root.children(recursive=True))}
    except psutil.Error:
        return set()


def _rss_mib(job: JobProcess) -> float:
    total = 0.0
    try:
        root = psutil.Process(job.pid)
        for p in [root, *root.children(recursive=True)]:
            try:
                total += p.memory_info().rss / 2**20
            except psutil.Error:
                continue
    except psutil.Error:
        return math.nan
    return total


def _poll_all(jobs: Sequence[JobProcess]) -> None:
    for job in jobs:
        job.poll()
        job.check_alive()


def _last_t(job: JobProcess) -> float:
    return job.steps[-1].t if job.steps else -math.inf


def run_window(
    running: Sequence[JobProcess],
    paused: Sequence[JobProcess],
    cfg: WindowConfig,
    probe: GpuProbe | None = None,
    *,
    label: dict[int, str] | None = None,
) -> Window:
    """Pause ``paused``, resume ``running``, settle, measure one window. Raises ``JobFailed`` if a job exits."""
    for job in paused:
        job.pause()
    for job in running:
        job.resume()
    everyone = [*running, *paused]
    settle_until = time.time() + cfg.settle_s
    while time.time() < settle_until:
        _poll_all(everyone)
        time.sleep(POLL_S)
    if probe is not None:
        probe.begin()
    begin = time.time()
    cpu0 = [j.cpu_seconds() for j in running]
    end, limit = begin + cfg.window_s, begin + cfg.window_s * cfg.max_stretch
    while True:
        now = time.time()
        _poll_all(everyone)
        # the window ends at its length once every running job has finished enough iterations inside it;
        # iterations are reported when the device finishes them, so one ending after ``now`` may still come
        if now >= end and (all(len(inside(j.steps, begin, now)) >= cfg.min_iters for j in running) or now >= limit):
            break
        time.sleep(POLL_S)
    end = time.time()
    gpu = probe.sample(set().union(*(_tree_pids(j) for j in running))) if probe is not None else None
    cpu1 = [j.cpu_seconds() for j in running]
    rss = [_rss_mib(j) for j in running]
    tail_until = time.time() + cfg.tail_timeout_s  # iterations that ended inside the window, reported late
    while time.time() < tail_until and any(_last_t(j) < end for j in running):
        _poll_all(everyone)
        time.sleep(POLL_S)
    names = label or {}
    out = {}
    for job, c0, c1, r in zip(running, cpu0, cpu1, rss, strict=True):
        steps = inside(job.steps, begin, end)
        mems = [s.mem_mib for s in job.steps if not math.isnan(s.mem_mib)]
        out[names.get(id(job), job.name)] = JobWindow(
            throughput=window_throughput(steps),
            iterations=len(steps),
            cpu_cores=max(0.0, (c1 - c0) / max(end - begin, 1e-9)),
            rss_mib=r,
            mem_mib=max(mems) if mems else math.nan,
            steps=tuple(steps),
        )
    return Window(begin, end, out, gpu)


def wait_warm(jobs: Sequence[JobProcess], warmup_s: float, warmup_iters: int, startup_timeout_s: float) -> None:
    """Run every job until it has finished ``warmup_iters`` iterations or run ``warmup_s`` since its first."""
    t0 = time.time()
    for job in jobs:
        job.resume()
    while True:
        now = time.time()
        _poll_all(jobs)
        if all(_warm(j, warmup_s, warmup_iters, now) for j in jobs):
            return
        if now - t0 > startup_timeout_s + warmup_s:
            slow = [j.name for j in jobs if not _warm(j, warmup_s, warmup_iters, now)]
            raise SpecError(f"no steady progress within {startup_timeout_s + warmup_s:.0f} s", where=f"workloads {slow}")
        time.sleep(POLL_S)


def _warm(job: JobProcess, warmup_s: float, warmup_iters: int, now: float) -> bool:
    if job.first_step_wall is None:
        return False
    return len(job.steps) >= warmup_iters or now - job.first_step_wall >= warmup_s


# ---- the interleaved pair protocol ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SideFigures:
    """One side of a pair over the repeats: solo and co-located throughput per repeat, and the slowdowns."""

    solo: tuple[float, ...]
    colo: tuple[float, ...]
    solo_windows: tuple[JobWindow, ...] = field(default=(), repr=False)

    @property
    def slowdowns(self) -> tuple[float, ...]:
        """Per repeat with a complete iteration in both windows (a repeat without one is left out)."""
        return tuple(
            s / c
            for s, c in zip(self.solo, self.colo, strict=True)
            if math.isfinite(s) and s > 0 and math.isfinite(c) and c > 0
        )

    @property
    def repeats(self) -> int:
        return len(self.slowdowns)

    @property
    def slowdown(self) -> float:
        return float(statistics.median(self.slowdowns)) if self.slowdowns else math.nan

    @property
    def slowdown_min(self) -> float:
        return min(self.slowdowns, default=math.nan)

    @property
    def slowdown_max(self) -> float:
        return max(self.slowdowns, default=math.nan)

    @property
    def solo_tput(self) -> float:
        good = [s for s in self.solo if math.isfinite(s) and s > 0]
        return float(statistics.median(good)) if good else math.nan

    @property
    def colo_tput(self) -> float:
        """The co-located throughput whose ratio to ``solo_tput`` is the median slowdown."""
        return self.solo_tput / self.slowdown if self.slowdown > 0 else math.nan


@dataclass(frozen=True, slots=True)
class PairFigures:
    a: SideFigures
    b: SideFigures
    windows: tuple[Window, ...]

    @property
    def suspect(self) -> bool:
        """A median slowdown below ``SUSPECT_BELOW`` on either side: sharing made a job faster, which it cannot."""
        return any(not s >= SUSPECT_BELOW for s in (self.a.slowdown, self.b.slowdown))  # NaN: nothing measured

    def solo_gpu(self, side: str) -> list[GpuSample]:
        """The device's counters over the side's solo windows."""
        want = {side}
        return [w.gpu for w in self.windows if w.gpu is not None and set(w.jobs) == want]


SCHEDULES = (("a", "b", "ab"), ("b", "ab", "a"), ("ab", "a", "b"))  # rotated, so no window is always first


EXTRA_ROUNDS = 2  # rounds added when a round had a window without a complete iteration


def interleave(a: JobProcess, b: JobProcess, cfg: WindowConfig, probe: GpuProbe | None = None) -> PairFigures:
    """Measure a warm pair: ``cfg.repeats`` rounds of A alone, B alone and A+B, in rotating order.

    A round in which a side finished no iteration inside one of its windows gives it no slowdown; up to
    ``EXTRA_ROUNDS`` more rounds are run so that each side still gets ``cfg.repeats`` of them."""
    label = {id(a): "a", id(b): "b"}
    solo: dict[str, list[float]] = {"a": [], "b": []}
    colo: dict[str, list[float]] = {"a": [], "b": []}
    solo_windows: dict[str, list[JobWindow]] = {"a": [], "b": []}
    windows: list[Window] = []

    def valid(x: str) -> int:
        return len(SideFigures(tuple(solo[x]), tuple(colo[x])).slowdowns)

    for r in range(cfg.repeats + EXTRA_ROUNDS):
        if r >= cfg.repeats and min(valid("a"), valid("b")) >= cfg.repeats:
            break
        for which in SCHEDULES[r % len(SCHEDULES)]:
            running = [j for j, name in ((a, "a"), (b, "b")) if name in which]
            paused = [j for j in (a, b) if j not in running]
            w = run_window(running, paused, cfg, probe, label=label)
            windows.append(w)
            for name, jw in w.jobs.items():
                if which == "ab":
                    colo[name].append(jw.throughput)
                else:
                    solo[name].append(jw.throughput)
                    solo_windows[name].append(jw)
    for job in (a, b):
        job.resume()
    sides = {x: SideFigures(tuple(solo[x]), tuple(colo[x]), tuple(solo_windows[x])) for x in ("a", "b")}
    return PairFigures(sides["a"], sides["b"], tuple(windows))
