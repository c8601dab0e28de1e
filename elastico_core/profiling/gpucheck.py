"""One command to check what ElastiCo would plan with on a GPU: ``python -m elastico_core.profiling.gpucheck``.

Run on a new GPU node or image (``PYTHONPATH=. python3 -m elastico_core.profiling.gpucheck --out DIR``
from a checkout; ``make gpu-check`` from the project venv). It needs only what a CUDA image has: the
standard library, torch, numpy, psutil and nvidia-ml-py. In about six minutes on an H200 it:

1. profiles every training workload's default configuration, plus the knob pairs that matter (AMP on
   and off for ResNet-50 and BERT, activation checkpointing on and off for BERT, two micro-batch sizes),
   each alone on the device, through the real entrypoint the operator launches;
2. checks the memory cap both ways: a budget below the job's need ends in the dedicated out-of-memory
   exit with its ``oom`` event, a budget above it runs within it;
3. measures six co-located pairs under MPS (heavy with heavy, heavy with light, and the light ncf+ppo)
   with the interleaved protocol (A alone, B alone, A+B, three times; ``profiling.windows``);
4. writes, as it goes (a run cut short keeps what it measured), into ``--out``: ``measurements.jsonl``
   (every record; ``elastico profiles import`` folds it into the profile store), ``colocation.csv`` (the
   co-location dataset contract) and ``report.md`` (measured against the estimators' figures).

``--device cpu --quick`` runs the same path at tiny scale on one CPU core in well under three minutes
(what the tests exercise). Exit code 0 when every measurement ran, 1 when some failed (each failure is
a record and a line of the report), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from elastico_core.model.errors import ElasticoError, SpecError
from elastico_core.model.hardware import HardwareSignature, gpu_model
from elastico_core.model.knobs import Knobs
from elastico_core.model.launch import ENV_MEM_BUDGET, EXIT_OOM
from elastico_core.model.workload import JobKind
from elastico_core.profiling import report as report_md
from elastico_core.profiling.configs import find_workload, resolve_knobs
from elastico_core.profiling.device import idlest_core
from elastico_core.profiling.gpu_probe import GpuProbe, GpuSample, open_probe
from elastico_core.profiling.launcher import Device, JobFailed, JobProcess, JobSpecLaunch
from elastico_core.profiling.mps import mps_session
from elastico_core.profiling.pair_rows import RowDevice, did_not_fit_row, mean_counters, pair_row
from elastico_core.profiling.pairs import Candidate
from elastico_core.profiling.records import ERROR, MEMCAP, PAIR, RUN, SOLO, RecordWriter, now_iso, write_colocation_csv
from elastico_core.profiling.signature import cpu_signature, framework, gpu_signature
from elastico_core.profiling.windows import (
    JobWindow,
    Window,
    WindowConfig,
    interleave,
    run_window,
    wait_warm,
)
from elastico_core.rst.estimators import estimate
from elastico_core.rst.traced_estimator import TracedEstimator

EXIT_PARTIAL = 1
CPU_RETRIES, CPU_MIN_SHARE = 2, 0.8
MEASUREMENTS, COLOCATION, REPORT = "measurements.jsonl", "colocation.csv", "report.md"
SHIPPED_PROFILES = Path(__file__).resolve().parents[2] / "profiles"


def side(text: str) -> Candidate:
    """``bert`` or ``bert:{"amp": true}``: a training configuration (defaults fill the rest)."""
    name, _, knobs = text.partition(":")
    workload = find_workload(name, JobKind.TRAIN)
    return Candidate(workload, resolve_knobs(workload, Knobs.from_json(knobs) if knobs.strip() else Knobs.of({})))


@dataclass(frozen=True, slots=True)
class CheckPlan:
    """What one run measures, and for how long."""

    solo: tuple[Candidate, ...]
    pairs: tuple[tuple[Candidate, Candidate], ...]
    memcap: Candidate
    warmup_s: float
    warmup_iters: int
    measure_s: float
    pair_windows: WindowConfig
    budget_s: float  # the run stops starting new measurements past this (the report says what it skipped)


def full_plan() -> CheckPlan:
    defaults = [side(w) for w in ("resnet50", "bert", "dcgan", "pointnet", "transformer", "lstm", "ncf", "ppo")]
    knob_pairs = [
        side('resnet50:{"micro_batch": 256}'),
        side('resnet50:{"micro_batch": 256, "amp": true}'),
        side('bert:{"amp": true}'),
        side('bert:{"checkpointing": true}'),
        side('bert:{"micro_batch": 32}'),
    ]
    pairs = (
        (side("ncf"), side("ppo")),  # light + light: where the old protocol reported speed-ups
        (side('resnet50:{"micro_batch": 256, "amp": true}'), side('bert:{"micro_batch": 32, "amp": true}')),
        (side('resnet50:{"micro_batch": 128}'), side("lstm")),
        (side('bert:{"micro_batch": 32, "checkpointing": true}'), side("ncf")),
        (side('transformer:{"micro_batch": 128}'), side("pointnet")),
        (side("dcgan"), side("ppo")),
    )
    return CheckPlan(
        solo=(*defaults[:2], *knob_pairs, *defaults[2:]),
        pairs=pairs,
        memcap=side('bert:{"micro_batch": 32}'),
        warmup_s=3.0,
        warmup_iters=15,
        measure_s=4.0,
        pair_windows=WindowConfig(window_s=2.5, settle_s=0.5, repeats=3),
        budget_s=400.0,
    )


def quick_plan() -> CheckPlan:
    return CheckPlan(
        solo=(side('resnet50:{"micro_batch": 32}'), side('resnet50:{"micro_batch": 32, "amp": true}'), side("ncf")),
        pairs=((side('ncf:{"micro_batch": 1024}'), side('ppo:{"micro_batch": 512}')),),
        memcap=side('resnet50:{"micro_batch": 32}'),
        warmup_s=1.0,
        warmup_iters=5,
        measure_s=1.5,
        pair_windows=WindowConfig(window_s=1.0, settle_s=0.2, repeats=3, min_iters=3),
        budget_s=150.0,
    )


# ---- the run ------------------------------------------------------------------------------------------


@dataclass
class Check:
    """One gpucheck run: its device, output folder and everything measured so far."""

    out: Path
    device: Device
    scale: str
    plan: CheckPlan
    probe: GpuProbe | None
    signature: HardwareSignature
    threads: int
    mps: bool = True
    started: float = field(default_factory=time.monotonic)
    records: list[dict[str, Any]] = field(default_factory=list)
    pair_rows: list[dict[str, object]] = field(default_factory=list)
    failures: int = 0
    skipped: list[str] = field(default_factory=list)
    workroot: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="elastico-gpucheck-")))
    traced: TracedEstimator | None = None  # the report compares every row with the traced estimate

    def __post_init__(self) -> None:
        self.writer = RecordWriter(self.out / MEASUREMENTS)
        self._seq = 0

    @property
    def gpu(self) -> bool:
        return self.device.gpu is not None

    def record(self, kind: str, /, **fields: Any) -> dict[str, Any]:
        rec = self.writer.write(kind, **fields)
        self.records.append(rec)
        return rec

    def over_budget(self, what: str) -> bool:
        if time.monotonic() - self.started > self.plan.budget_s:
            self.skipped.append(what)
            return True
        return False

    def spec(self, c: Candidate, *, paused: bool = False, extra: tuple[tuple[str, str], ...] = ()) -> JobSpecLaunch:
        return JobSpecLaunch(
            c.workload, c.knobs, self.scale, self.device, self.threads, None, 0, extra, max_seconds=600.0, paused=paused
        )

    def launch(self, spec: JobSpecLaunch) -> JobProcess:
        self._seq += 1
        return JobProcess.launch(spec, self.workroot / f"job{self._seq}-{spec.workload.name}")

    def write_report(self) -> None:
        report_md.write(self.out / REPORT, self.records, self.signature, self.skipped, self.traced)


def _label(c: Candidate) -> str:
    return f"{c.workload.name} {c.knobs.short()}"


def _row_device(check: Check) -> RowDevice:
    s = check.signature
    return RowDevice(s.gpu, float(s.gpu_mem_mib), None if check.gpu else len(check.device.cpus))


def _solo_tput(check: Check, c: Candidate) -> float:
    """The configuration's throughput alone as this run measured it, else as the estimators put it."""
    for rec in check.records:
        if rec.get("record") == SOLO and rec.get("workload") == c.workload.name and rec.get("knobs") == c.knobs.as_dict():
            return float(rec["throughput"])
    try:
        model = gpu_model(check.signature.gpu)
    except SpecError:
        return math.nan
    est = estimate(c.workload, c.knobs, model)
    return est.throughput if est is not None else math.nan


def solo_fields(check: Check, c: Candidate, jw: JobWindow, gpu: GpuSample | None, params: int) -> dict[str, Any]:
    """A profile row's figures (§4.1 iv) from one solo window: throughput, resource vector, counters."""
    if check.gpu:
        counters = mean_counters([gpu] if gpu is not None else [])
        proc = gpu.proc_mib if gpu is not None else math.nan
        mem = max(x for x in (proc, jw.mem_mib, 0.0) if math.isfinite(x))
        sm = min(1.0, counters["sm_active"]) if math.isfinite(counters["sm_active"]) else 1.0
    else:
        cores = float(len(check.device.cpus))
        sm = min(1.0, jw.cpu_cores / cores)
        mem = jw.mem_mib if math.isfinite(jw.mem_mib) else jw.rss_mib
        counters = {"sm_active": sm, "sm_occupancy": math.nan, "dram_active": math.nan, "tensor_active": math.nan}
    return {
        "workload": c.workload.name,
        "kind": c.workload.kind.value,
        "knobs": c.knobs.as_dict(),
        "unit": c.workload.unit,
        "throughput": jw.throughput,
        "gpu_mem_mib": mem,
        "sm": sm,
        "cpu_cores": jw.cpu_cores,
        "host_mem_mib": jw.rss_mib,
        "counters": {**counters, "fb_used_mb": mem},
        "iterations": jw.iterations,
        "params": params,
        "allocator_peak_mib": jw.mem_mib,
    }


def _common(check: Check) -> dict[str, Any]:
    s = check.signature
    return {
        "signature": {"gpu": s.gpu, "gpu_mem_mib": s.gpu_mem_mib, "driver": s.driver, "framework": s.framework},
        "scale": check.scale,
        "device": f"gpu{check.device.gpu}" if check.gpu else f"cpus {list(check.device.cpus)}",
        "measured_at": now_iso(),
        "host": socket.gethostname(),
    }


def _cpu_share(check: Check, w: Window, job: JobProcess) -> float:
    return w.jobs[job.name].cpu_cores / len(check.device.cpus)


def _params(job: JobProcess) -> int:
    ev = job.start_event or {}
    value = ev.get("params", 0)
    return int(value) if isinstance(value, (int, float)) else 0


def _stop(jobs: Sequence[JobProcess]) -> None:
    for job in jobs:
        job.stop(grace_s=0)


class Prefetch:
    """Jobs launched ahead, paused before they touch the device (GPU only: on a CPU the imports would
    compete with the measurement for the same cores)."""

    def __init__(self, check: Check) -> None:
        self.check = check
        self.ready: dict[int, JobProcess] = {}

    def start(self, key: int, spec: JobSpecLaunch) -> None:
        if self.check.gpu and key not in self.ready:
            self.ready[key] = self.check.launch(replace(spec, paused=True))

    def take(self, key: int, spec: JobSpecLaunch) -> JobProcess:
        job = self.ready.pop(key, None)
        if job is None:
            job = self.check.launch(replace(spec, paused=self.check.gpu))
        if self.check.gpu and not job.wait_stopped(timeout_s=120.0):
            raise SpecError("did not finish its imports within 120 s", where=f"workload {spec.workload.name!r}")
        return job

    def close(self) -> None:
        _stop(list(self.ready.values()))
        self.ready.clear()


def measure_solo(check: Check, log: Any) -> dict[str, float]:
    """Phase 1: each configuration alone. Returns the peak device memory measured per configuration label."""
    plan, peaks = check.plan, {}
    pre = Prefetch(check)
    try:
        for i, c in enumerate(plan.solo):
            if check.over_budget(f"solo {_label(c)}"):
                continue
            if i + 1 < len(plan.solo):
                pre.start(i + 1, check.spec(plan.solo[i + 1]))
            t0 = time.monotonic()
            job: JobProcess | None = None
            try:
                job = pre.take(i, check.spec(c))
                wait_warm([job], plan.warmup_s, plan.warmup_iters, startup_timeout_s=180.0)
                w = run_window([job], [], WindowConfig(window_s=plan.measure_s, settle_s=0.0), check.probe)
                for _ in range(CPU_RETRIES if not check.gpu else 0):
                    # a CPU shared with processes outside our control: a window in which the job got less
                    # than CPU_MIN_SHARE of its cores measured the neighbours; keep the least disturbed one
                    if _cpu_share(check, w, job) >= CPU_MIN_SHARE:
                        break
                    again = run_window([job], [], WindowConfig(window_s=plan.measure_s, settle_s=0.0), check.probe)
                    w = again if _cpu_share(check, again, job) > _cpu_share(check, w, job) else w
                jw = w.jobs[job.name]
                fields = solo_fields(check, c, jw, w.gpu, _params(job))
                check.record(SOLO, **fields, window_s=round(w.end - w.begin, 3), **_common(check))
                peaks[_label(c)] = fields["gpu_mem_mib"]
                log(f"solo  {_label(c):44s} {jw.throughput:10.1f} {c.workload.unit:10s} "
                    f"{fields['gpu_mem_mib']:9.0f} MiB  sm {fields['sm']:.2f}  ({time.monotonic() - t0:.1f} s)")  # fmt: skip
            except (JobFailed, ElasticoError, OSError) as exc:
                check.failures += 1
                check.record(ERROR, what=f"solo {_label(c)}", message=str(exc)[:500], **_common(check))
                log(f"solo  {_label(c)}: FAILED {str(exc)[:200]}")
            finally:
                if job is not None:
                    _stop([job])
            check.write_report()
    finally:
        pre.close()
    return peaks


@contextmanager
def _mps(check: Check) -> Iterator[tuple[tuple[str, str], ...] | None]:
    with mps_session(check.device, check.mps) as env:
        yield env


def measure_pairs(check: Check, log: Any) -> None:
    """Phase 2: co-located pairs under MPS, interleaved; a suspect pair (median slowdown < 0.97) is re-measured once."""
    plan = check.plan
    with _mps(check) as mps_env:
        extra = mps_env or ()
        pre = Prefetch(check)
        try:
            for i, (a, b) in enumerate(plan.pairs):
                name = f"{_label(a)} + {_label(b)}"
                if check.over_budget(f"pair {name}"):
                    continue
                if i + 1 < len(plan.pairs):
                    na, nb = plan.pairs[i + 1]
                    pre.start(2 * i + 2, check.spec(na, extra=extra))
                    pre.start(2 * i + 3, check.spec(nb, extra=extra))
                t0 = time.monotonic()
                jobs: list[JobProcess] = []
                try:
                    jobs = [pre.take(2 * i, check.spec(a, extra=extra)), pre.take(2 * i + 1, check.spec(b, extra=extra))]
                    wait_warm(jobs, plan.warmup_s, plan.warmup_iters, startup_timeout_s=180.0)
                    fig = interleave(jobs[0], jobs[1], plan.pair_windows, check.probe)
                    attempts = 1
                    if fig.suspect and not check.over_budget(f"re-measure of {name}"):
                        fig, attempts = interleave(jobs[0], jobs[1], plan.pair_windows, check.probe), 2
                    row = pair_row(_row_device(check), a, b, fig, (_params(jobs[0]), _params(jobs[1])))
                    check.pair_rows.append(row)
                    write_colocation_csv(check.out / COLOCATION, check.pair_rows)
                    check.record(
                        PAIR, row=row, mps=mps_env is not None, attempts=attempts,
                        slowdowns_a=list(fig.a.slowdowns), slowdowns_b=list(fig.b.slowdowns),
                        solo_a=list(fig.a.solo), colo_a=list(fig.a.colo), solo_b=list(fig.b.solo), colo_b=list(fig.b.colo),
                        colo_gpu=mean_counters([w.gpu for w in fig.windows if w.gpu is not None and len(w.jobs) == 2]),
                        **_common(check),
                    )  # fmt: skip
                    log(f"pair  {name}: slowdown {fig.a.slowdown:.2f} [{fig.a.slowdown_min:.2f}-{fig.a.slowdown_max:.2f}]"
                        f" / {fig.b.slowdown:.2f} [{fig.b.slowdown_min:.2f}-{fig.b.slowdown_max:.2f}]"
                        f"{' SUSPECT' if fig.suspect else ''} ({time.monotonic() - t0:.1f} s)")  # fmt: skip
                except JobFailed as exc:
                    if exc.out_of_memory:  # the contract's "did not fit": both sides 0
                        row = did_not_fit_row(_row_device(check), a, b, (_solo_tput(check, a), _solo_tput(check, b)))
                        check.pair_rows.append(row)
                        write_colocation_csv(check.out / COLOCATION, check.pair_rows)
                        check.record(PAIR, row=row, mps=mps_env is not None, did_not_fit=True, **_common(check))
                        log(f"pair  {name}: did not fit (out of memory)")
                    else:
                        check.failures += 1
                        check.record(ERROR, what=f"pair {name}", message=str(exc)[:500], **_common(check))
                        log(f"pair  {name}: FAILED {str(exc)[:200]}")
                except (ElasticoError, OSError) as exc:
                    check.failures += 1
                    check.record(ERROR, what=f"pair {name}", message=str(exc)[:500], **_common(check))
                    log(f"pair  {name}: FAILED {str(exc)[:200]}")
                finally:
                    _stop(jobs)
                check.write_report()
        finally:
            pre.close()


def _run_capped(check: Check, c: Candidate, env: tuple[tuple[str, str], ...], steps: int) -> dict[str, Any]:
    """Run ``c`` under a memory cap until ``steps`` iterations or its exit: what happened, and its peak."""
    job = check.launch(check.spec(c, extra=env))
    try:
        deadline = time.monotonic() + 180.0
        while time.monotonic() < deadline:
            job.poll()
            if job.popen.poll() is not None:
                job.poll()
                break
            if len(job.steps) >= steps:
                break
            time.sleep(0.05)
        running = job.popen.poll() is None
        peak = max((s.mem_mib for s in job.steps if math.isfinite(s.mem_mib)), default=math.nan)
    finally:
        code = job.stop(grace_s=0) if job.popen.poll() is None else job.popen.returncode
        job.poll()
    end = job.end_event or {}
    return {
        "exit_code": None if running else code,
        "oom": end.get("event") == "oom" or code == EXIT_OOM,
        "oom_event": end if end.get("event") == "oom" else None,
        "steps": len(job.steps),
        "peak_mib": end.get("peak_mib", peak) if end.get("event") == "oom" else peak,
        "ran": len(job.steps) >= steps,
    }


def check_memory_cap(check: Check, peaks: dict[str, float], log: Any) -> None:
    """Phase 3: the cap both ways (too small: the dedicated OOM exit; enough: runs within it)."""
    c = check.plan.memcap
    if check.over_budget(f"memory cap {_label(c)}"):
        return
    need = peaks.get(_label(c))
    if need is None or not math.isfinite(need) or need <= 0:
        need = 4096.0 if check.gpu else 256.0
    cases = (("too small", max(1, int(need * 0.3))), ("enough", int(need * 1.3 + (512 if check.gpu else 64))))
    for case, budget in cases:
        try:
            res = _run_capped(check, c, ((ENV_MEM_BUDGET, str(budget)),), steps=8)
            ok = res["oom"] and res["exit_code"] == EXIT_OOM if case == "too small" else res["ran"] and not res["oom"]
            within = case == "too small" or not math.isfinite(res["peak_mib"]) or res["peak_mib"] <= budget
            check.record(MEMCAP, workload=c.workload.name, knobs=c.knobs.as_dict(), case=case, budget_mib=budget,
                         expected="oom" if case == "too small" else "runs", passed=bool(ok and within), **res,
                         **_common(check))  # fmt: skip
            if not (ok and within):
                check.failures += 1
            log(f"cap   {_label(c)} {case} ({budget} MiB): {'oom' if res['oom'] else 'ran'} exit {res['exit_code']} "
                f"peak {res['peak_mib']:.0f} MiB -> {'ok' if ok and within else 'UNEXPECTED'}")  # fmt: skip
        except (JobFailed, ElasticoError, OSError) as exc:
            check.failures += 1
            check.record(ERROR, what=f"memory cap {case}", message=str(exc)[:500], **_common(check))
    check.write_report()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m elastico_core.profiling.gpucheck", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder for measurements.jsonl, colocation.csv and report.md")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="default: cuda where a GPU is visible")
    p.add_argument("--gpu", type=int, default=0, help="GPU index (default 0)")
    p.add_argument("--quick", action="store_true", help="three configurations, one pair, short windows")
    p.add_argument("--scale", choices=("tiny", "small", "full"), help="model size (default: full on a GPU, tiny on a CPU)")
    p.add_argument("--no-mps", action="store_true", help="co-locate pairs by time-slicing instead of under MPS")
    p.add_argument("--threads", type=int, default=0, help="torch threads per job (default: 1 on CPU, 4 on GPU)")
    p.add_argument("--profiles", default=str(SHIPPED_PROFILES),
                   help="profile store whose traced/ cache the report compares with (default: the checkout's)")  # fmt: skip
    return p


def _device(choice: str, index: int) -> tuple[Device, GpuProbe | None]:
    if choice in ("auto", "cuda"):
        probe = open_probe(index)
        if probe is not None:
            import psutil

            return Device(tuple(sorted(psutil.Process().cpu_affinity() or [0])), index), probe
        if choice == "cuda":
            raise SpecError(f"no GPU {index} visible to NVML (nvidia-ml-py and a driver are needed)", field="device")
    return Device((idlest_core(),)), None


def run(args: argparse.Namespace, log: Any = print) -> int:
    device, probe = _device(args.device, args.gpu)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in (MEASUREMENTS, COLOCATION, REPORT):  # one run per folder: never mix two runs' records
        (out / name).unlink(missing_ok=True)
    plan = quick_plan() if args.quick else full_plan()
    signature = gpu_signature(probe) if probe is not None else cpu_signature(len(device.cpus))
    scale = args.scale or ("full" if device.gpu is not None else "tiny")
    threads = args.threads or (4 if device.gpu is not None else len(device.cpus))
    check = Check(out, device, scale, plan, probe, signature, threads, mps=not args.no_mps)
    check.traced = TracedEstimator.open(Path(args.profiles))
    import torch

    check.record(RUN, started_at=now_iso(), argv=sys.argv[1:], python=platform.python_version(),
                 torch=torch.__version__, cuda=torch.version.cuda, framework=framework("torch"),
                 gpu_name=probe.name if probe else None, plan={"solo": [_label(c) for c in plan.solo],
                 "pairs": [f"{_label(a)} + {_label(b)}" for a, b in plan.pairs], "memcap": _label(plan.memcap)},
                 **_common(check))  # fmt: skip
    log(f"gpucheck on {signature.key} ({check.scale} scale) -> {out}")
    try:
        peaks = measure_solo(check, log)
        check_memory_cap(check, peaks, log)
        measure_pairs(check, log)
    finally:
        check.write_report()
        if probe is not None:
            probe.close()
        shutil.rmtree(check.workroot, ignore_errors=True)
    for what in check.skipped:
        log(f"skipped (time budget): {what}")
    log(f"done in {time.monotonic() - check.started:.0f} s: {len(check.records)} records, {check.failures} failures")
    return EXIT_PARTIAL if check.failures or check.skipped else 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return run(args, log=lambda line: print(line, flush=True))
    except ElasticoError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
