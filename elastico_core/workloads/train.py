"""Training entrypoint: ``python -m elastico_core.workloads.train --workload resnet50``.

Knobs arrive by the launch contract (``elastico_core.model.launch``): micro-batch, activation
checkpointing, AMP, data-parallel degree; CUDA memory caps from ``ELASTICO_MEMORY_FRACTION`` /
``ELASTICO_GPU_MEM_BUDGET_MIB`` and ``PYTORCH_CUDA_ALLOC_CONF``. With dp > 1 and no torchrun around it,
the process spawns its dp - 1 peers (gloo on CPU, NCCL on GPU) and stays rank 0. On SIGTERM or a
switch request it finishes the current iteration, saves model/optimizer/step and exits 0; relaunched
(with the same or other knobs) it resumes at that step. Out of memory (the CUDA allocator under its
cap, or the CPU allocator under ``RLIMIT_DATA``) ends the process with ``EXIT_OOM`` after a final
``{"event": "oom", "budget_mib", "peak_mib", ...}`` progress line, which launchers read for certain.

On a GPU the loop keeps the device busy the way real training does: batches are made on the device,
TF32 and cuDNN autotuning are on, CNNs run channels-last, the optimizer update is fused, and the host
never waits for the device in an iteration (iteration times come from CUDA events; see ``StepTimer``).
With ``ELASTICO_PAUSE_BEFORE_DEVICE`` set, the process stops itself (SIGSTOP) after its imports and
before it touches the device, so a profiler can start it ahead of time and let it run when the device
is free (SIGCONT).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as tdist
from torch import nn

from elastico_core.model.errors import SpecError
from elastico_core.model.launch import ENV_PAUSE_BEFORE_DEVICE, EXIT_OOM
from elastico_core.workloads import checkpoint
from elastico_core.workloads.contract import TrainLaunch, check_writable_dir, train_launch
from elastico_core.workloads.control import CHECKPOINT, NONE, StopRequests
from elastico_core.workloads.entry import guarded
from elastico_core.workloads.memory import MemoryMeter
from elastico_core.workloads.progress import ProgressWriter, StepEvent
from elastico_core.workloads.runtime import (
    Dist,
    StepTimer,
    Timed,
    amp_dtype,
    apply_memory_cap,
    configure_backends,
    is_out_of_memory,
    pick_device,
    set_threads,
)
from elastico_core.workloads.zoo import build_task
from elastico_core.workloads.zoo.base import StepContext, Task, generator


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m elastico_core.workloads.train", description=__doc__.split("\n")[0])
    p.add_argument("--workload", help="one of the 8 training workloads (default: $ELASTICO_WORKLOAD)")
    p.add_argument("--knobs", help="JSON object; overrides $ELASTICO_KNOBS / $ELASTICO_KNOB_*")
    p.add_argument("--scale", help="tiny | small | full (default: $ELASTICO_SCALE, else full on GPU, tiny on CPU)")
    p.add_argument("--steps", type=int, default=0, help="stop after this many iterations in total (0: until stopped)")
    p.add_argument("--max-seconds", type=float, default=0.0, help="checkpoint and stop after this long (0: no limit)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: $ELASTICO_TORCH_THREADS)")
    p.add_argument("--checkpoint-dir", help="default: $ELASTICO_CHECKPOINT_DIR (no checkpoints without one)")
    p.add_argument("--progress-file", help="JSON-lines progress (default: $ELASTICO_PROGRESS_FILE, else stderr)")
    p.add_argument("--control-file", help="switch requests (default: $ELASTICO_CONTROL_FILE)")
    return p


@dataclass(frozen=True, slots=True)
class Outcome:
    event: str  # done | checkpointed | stopped | oom
    step: int


AGREE_EVERY = 8  # data-parallel ranks agree on stop requests every few iterations (each agreement syncs)


@dataclass(frozen=True, slots=True)
class _Issued:
    """An iteration as the host issued it; its timing comes later, from the device."""

    step: int
    samples: float
    n: float
    mem_mib: float
    cpu_s: float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_peers(dp: int, argv: list[str]) -> list[subprocess.Popen[bytes]]:
    """Start ranks 1..dp-1 of a data-parallel group on this host; this process becomes rank 0."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(dp), RANK="0", LOCAL_RANK="0"
    )
    peers = []
    for rank in range(1, dp):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        peers.append(subprocess.Popen([sys.executable, "-m", "elastico_core.workloads.train", *argv], env=env))
    return peers


def agree(request: int, dist: Dist, device: torch.device, step: int = 0) -> int:
    """The strongest stop request of any rank, so every rank stops after the same iteration.

    Ranks compare every ``AGREE_EVERY`` iterations (the same ones on every rank), not every iteration:
    the comparison waits for the device."""
    if dist.world == 1:
        return request
    if step % AGREE_EVERY:
        return NONE
    flag = torch.tensor([request], dtype=torch.int32, device=device)
    tdist.all_reduce(flag, op=tdist.ReduceOp.MAX)
    return int(flag.item())


def _check_resume(payload: dict[str, object], launch: TrainLaunch, path: Path) -> None:
    for key, want in (("workload", launch.workload.name), ("scale", launch.scale.value)):
        if payload.get(key) != want:
            raise SpecError(f"checkpoint is of {key} {payload.get(key)!r}, this run is {want!r}", where=str(path))


def train(launch: TrainLaunch, dist: Dist, *, steps: int, max_seconds: float, seed: int) -> Outcome:
    set_threads(launch.threads)
    progress = ProgressWriter(launch.paths.progress_file, enabled=dist.is_main)
    if os.environ.get(ENV_PAUSE_BEFORE_DEVICE):
        os.kill(os.getpid(), signal.SIGSTOP)  # the profiler lets us go (SIGCONT) when the device is free
    device = pick_device(dist.local_rank)
    configure_backends(device)
    meter = MemoryMeter(device)
    fraction: float | None = None
    try:
        return _train(launch, dist, device, meter, progress, steps=steps, max_seconds=max_seconds, seed=seed)
    except Exception as exc:
        if not is_out_of_memory(exc):
            progress.emit("error", message=f"{type(exc).__name__}: {exc}"[:500])
            raise
        fraction = launch.memory_fraction
        progress.emit(
            "oom",
            budget_mib=launch.mem_budget_mib,
            memory_fraction=fraction,
            peak_mib=round(meter.peak_mib(), 1),
            device=str(device),
            message=f"{type(exc).__name__}: {exc}"[:500],
        )
        progress.close()
        return Outcome("oom", 0)


def _train(
    launch: TrainLaunch,
    dist: Dist,
    device: torch.device,
    meter: MemoryMeter,
    progress: ProgressWriter,
    *,
    steps: int,
    max_seconds: float,
    seed: int,
) -> Outcome:
    with device:  # parameters are made where they train (a 335 M-parameter model builds in a blink there)
        task: Task = build_task(launch.workload.name, launch.scale, seed)
    task.set_checkpointing(launch.checkpointing)
    task.to(device)
    for _, module in task.raw_modules():
        meter.attach(module)
    if dist.world > 1:
        tdist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=dt.timedelta(seconds=120))

        def ddp(m: nn.Module) -> nn.Module:
            return nn.parallel.DistributedDataParallel(m, device_ids=[device.index] if device.type == "cuda" else None)

        task.wrap(ddp)
    task.make_optimizers()
    fraction = apply_memory_cap(device, launch.memory_fraction, launch.mem_budget_mib)
    ctx = StepContext(device, launch.amp, amp_dtype(device))
    if ctx.amp and ctx.amp_dtype == torch.float16:
        ctx = StepContext(device, True, torch.float16, torch.amp.GradScaler(device.type))

    step, samples = 0, 0.0
    folder = launch.paths.checkpoint_dir
    payload = checkpoint.load(folder) if folder else None
    if payload is not None and folder is not None:
        _check_resume(payload, launch, checkpoint.checkpoint_path(folder))
        task.load_state(payload["task"])
        if ctx.scaler is not None and payload.get("scaler"):
            ctx.scaler.load_state_dict(payload["scaler"])
        step, samples = int(payload["step"]), float(payload["samples"])

    stop = StopRequests(launch.paths.control_file)
    stop.install()
    progress.emit(
        "start",
        workload=launch.workload.name,
        knobs=launch.knobs.as_dict(),
        scale=launch.scale.value,
        step=step,
        samples=samples,
        total_steps=steps if steps > 0 else None,  # what progress and ETA are measured against
        resumed=payload is not None,
        params=task.param_count(),
        device=str(device),
        dp=dist.world,
        threads=torch.get_num_threads(),
        memory_fraction=fraction,
        memory_method=meter.method,
        pid=os.getpid(),
    )
    deadline = time.monotonic() + max_seconds if max_seconds > 0 else None
    request = NONE
    timer: StepTimer[_Issued] = StepTimer(device)

    def report(done: list[Timed[_Issued]]) -> None:
        # an iteration's time runs from the end of the previous one, so progress writes and control polls
        # count too: the sum of dt_s is the job's wall time, which is what a co-located neighbour slows down
        for d in done:
            it = d.item
            ev = StepEvent(it.step, it.samples, it.n, d.dt_s, d.t, it.mem_mib, it.cpu_s)
            progress.step(ev, loss=round(d.loss, 5))

    c0 = time.process_time()
    while steps <= 0 or step < steps:
        meter.at_step(step)
        torch.manual_seed(seed * 7919 + step * 31 + dist.rank)  # dropout etc.: a function of the step
        batch = task.batch(launch.micro_batch, generator(seed, step, dist.rank, device))
        loss = task.train_step(batch, ctx)
        c1 = time.process_time()
        on_cpu, c0 = c1 - c0, c1
        step += 1
        n = task.samples(launch.micro_batch) * dist.world
        samples += n
        report(timer.end(_Issued(step, samples, n, meter.peak_mib(), on_cpu), loss))
        request = stop.poll()
        if deadline is not None and time.monotonic() >= deadline:
            request = max(request, CHECKPOINT)
        request = agree(request, dist, device, step)
        if request != NONE:
            break
    report(timer.drain())
    finished = steps > 0 and step >= steps
    saved = folder is not None and (finished or request == CHECKPOINT)
    if saved and dist.is_main and folder is not None:
        checkpoint.save(
            folder,
            {
                "step": step,
                "samples": samples,
                "workload": launch.workload.name,
                "scale": launch.scale.value,
                "knobs": launch.knobs.as_dict(),
                "task": task.state(),
                "scaler": ctx.scaler.state_dict() if ctx.scaler is not None else None,
            },
        )
    outcome = Outcome("done" if finished else "checkpointed" if saved else "stopped", step)
    if dist.world > 1:
        tdist.barrier()
        tdist.destroy_process_group()
    progress.emit(outcome.event, step=step, samples=samples)
    progress.close()
    return outcome


@guarded
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    launch = train_launch(
        os.environ,
        workload=args.workload,
        knobs_json=args.knobs,
        scale=args.scale,
        threads=args.threads,
        checkpoint_dir=args.checkpoint_dir,
        progress_file=args.progress_file,
        control_file=args.control_file,
        cuda=torch.cuda.is_available(),
    )
    if launch.paths.checkpoint_dir is not None:
        check_writable_dir(launch.paths.checkpoint_dir, "checkpoint dir")
    dist = Dist.from_env()
    peers: list[subprocess.Popen[bytes]] = []
    if launch.dp > 1 and dist.world == 1:
        peers = spawn_peers(launch.dp, argv)
        dist = Dist.from_env()
    elif dist.world != launch.dp:
        raise SpecError(f"WORLD_SIZE={dist.world} disagrees with the knob dp={launch.dp}", field="dp")
    try:
        outcome = train(launch, dist, steps=args.steps, max_seconds=args.max_seconds, seed=args.seed)
    finally:
        for p in peers:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    if outcome.event == "oom":
        return EXIT_OOM
    return max((p.returncode or 0 for p in peers), default=0)


if __name__ == "__main__":
    sys.exit(main())
