"""Metrics of one simulation (§5.1's list), computed from a ``SimResult`` alone.

* **JCT** = finish - submit of finished jobs (average, median, p95); **queueing delay** = first
  start - submit.
* **Throughput** = useful work per second inside the measurement window [0, last submission], in
  *default GPU-seconds per second*: a job's work counts as ``duration_s x GPUs`` of the trace (what
  it costs at the configuration it asked for), so a static scheduler that keeps every GPU busy
  scores the cluster's GPU count, and reshaping or co-location can score more.
* **SM utilisation**: per GPU, the SM share (``ResourceVector.sm``) of each running job scaled by the
  fraction of its solo speed it gets, summed and capped at 1; averaged over GPUs and the window.
  **Memory utilisation**: real device memory held over the memory usable by jobs (device less M_sys).
* **Attainment**: the fraction of finished jobs whose throughput over the time they held GPUs
  (switches, migrations and restarts included) met their floor.
* **Scheduling latency**: wall-clock time of each policy call (p50, p99).
* **Reconfigurations per GPU-hour**: switches + migrations per GPU and hour of the window
  (``checkpoint_resumes_per_gpu_hour`` counts only those that went through a checkpoint).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from elastico_core.sim.result import SimResult

JSON_KEYS = (
    "avg_jct_s", "median_jct_s", "p95_jct_s", "throughput", "sm_util", "mem_util", "attainment",
    "sched_latency_ms_p50", "jobs_finished",
)


@dataclass(frozen=True, slots=True)
class PolicyMetrics:
    policy: str
    gpus: int
    jobs_total: int
    jobs_finished: int
    avg_jct_s: float
    median_jct_s: float
    p95_jct_s: float
    avg_queue_s: float
    p95_queue_s: float
    throughput: float  # default GPU-seconds of work per second, in the window
    sm_util: float  # 0..1
    mem_util: float  # 0..1
    gpu_busy: float  # fraction of GPUs holding a job, 0..1
    attainment: float  # 0..1
    attainment_train: float
    attainment_infer: float
    sched_latency_ms_p50: float
    sched_latency_ms_p99: float
    policy_calls: int
    reconfig_per_gpu_hour: float
    checkpoint_resumes_per_gpu_hour: float
    switches: int
    migrations: int
    preemptions: int
    oom_restarts: int
    changing_gpu_h: float  # GPU-hours spent in switches, migrations, resumes and crash loops
    window_s: float
    makespan_s: float
    events: int
    events_per_s: float
    wall_s: float

    def as_json(self) -> dict[str, float | int]:
        d = asdict(self)
        d.pop("policy")
        return {k: _clean(v) for k, v in d.items()}

    def headline(self) -> dict[str, float | int]:
        """The keys scripts read (``--json``), in their documented order."""
        full = self.as_json()
        return {k: full[k] for k in JSON_KEYS}


def _clean(v: object) -> float | int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    f = float(v)  # type: ignore[arg-type]
    return round(f, 6) if math.isfinite(f) else 0.0


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else 0.0


def _frac(flags: list[bool]) -> float:
    return float(np.mean(flags)) if flags else 1.0


def summarize(result: SimResult) -> PolicyMetrics:
    jobs = result.jobs
    done = [j for j in jobs if j.finished]
    jct = np.array([j.jct_s for j in done])
    started = [j for j in jobs if not math.isnan(j.first_start_s)]
    queue = np.array([j.queue_s for j in started])
    w = result.window_s
    s = result.series
    g = max(result.gpus, 1)
    usable = result.usable_mem_mib * g
    hours = w / 3600.0
    switches = sum(j.switches for j in jobs)
    migrations = sum(j.migrations for j in jobs)
    ck = sum(j.checkpoint_resumes for j in jobs)
    lat = np.array(result.decide_ms)
    makespan = max((j.finish_s for j in done), default=0.0)
    return PolicyMetrics(
        policy=result.policy,
        gpus=result.gpus,
        jobs_total=len(jobs),
        jobs_finished=len(done),
        avg_jct_s=float(jct.mean()) if len(jct) else 0.0,
        median_jct_s=_pct(jct, 50),
        p95_jct_s=_pct(jct, 95),
        avg_queue_s=float(queue.mean()) if len(queue) else 0.0,
        p95_queue_s=_pct(queue, 95),
        throughput=s.mean("rate", 0.0, w),
        sm_util=s.mean("sm", 0.0, w) / g,
        mem_util=s.mean("mem", 0.0, w) / usable if usable > 0 else 0.0,
        gpu_busy=s.mean("busy", 0.0, w) / g,
        attainment=_frac([j.met_floor for j in done]),
        attainment_train=_frac([j.met_floor for j in done if j.kind == "train"]),
        attainment_infer=_frac([j.met_floor for j in done if j.kind == "infer"]),
        sched_latency_ms_p50=_pct(lat, 50),
        sched_latency_ms_p99=_pct(lat, 99),
        policy_calls=len(lat),
        reconfig_per_gpu_hour=(switches + migrations) / (g * hours) if hours > 0 else 0.0,
        checkpoint_resumes_per_gpu_hour=ck / (g * hours) if hours > 0 else 0.0,
        switches=switches,
        migrations=migrations,
        preemptions=sum(j.preemptions for j in jobs),
        oom_restarts=sum(j.ooms for j in jobs),
        changing_gpu_h=sum(j.changing_gpu_s for j in jobs) / 3600.0,
        window_s=w,
        makespan_s=makespan,
        events=result.events,
        events_per_s=result.events / result.wall_s if result.wall_s > 0 else 0.0,
        wall_s=result.wall_s,
    )


def normalised(metrics: PolicyMetrics, baseline: PolicyMetrics) -> dict[str, float]:
    """Ratios to a baseline (Table 4 style): JCT and throughput as multiples of the baseline's."""

    def ratio(a: float, b: float) -> float:
        return a / b if b > 0 else math.nan

    return {
        "avg_jct": ratio(metrics.avg_jct_s, baseline.avg_jct_s),
        "median_jct": ratio(metrics.median_jct_s, baseline.median_jct_s),
        "p95_jct": ratio(metrics.p95_jct_s, baseline.p95_jct_s),
        "throughput": ratio(metrics.throughput, baseline.throughput),
        "sm_util": ratio(metrics.sm_util, baseline.sm_util),
    }
