"""Batch-inference entrypoint: ``python -m elastico_core.workloads.infer --workload qwen-1.7b --input shard.jsonl``.

Reads a shard (JSONL or parquet), generates with vLLM when it is installed and a GPU is present, else
with the CPU engine (``cpu_engine``: the project's byte-level LM, batched, with prefix caching), and
writes parquet through polars, incrementally (``shard``), so a relaunch continues where the last run
stopped. Knobs come from the launch contract; vLLM-style engine arguments (what the planner's budget
mapping emits: ``--max-num-seqs=4 --gpu-memory-utilization=0.437 --enable-prefix-caching``) override them.
Progress is JSON lines, ``n`` = generated tokens per iteration.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from elastico_core.model.errors import SpecError
from elastico_core.model.knobs import Knobs
from elastico_core.model.launch import ENV_CONTROL_FILE, ENV_MODEL, ENV_PROGRESS_FILE, ENV_THREADS, ENV_WORKLOAD
from elastico_core.model.workload import JobKind, Workload
from elastico_core.workloads.contract import default_scale, find_workload, knobs_from_env, resolve_knobs
from elastico_core.workloads.control import CHECKPOINT, NONE, STOP, StopRequests
from elastico_core.workloads.cpu_engine import CpuEngine, Engine, EngineConfig, Request, Tick
from elastico_core.workloads.entry import guarded
from elastico_core.workloads.memory import MemoryMeter
from elastico_core.workloads.progress import ProgressWriter, StepEvent
from elastico_core.workloads.runtime import set_threads
from elastico_core.workloads.scale import Scale, parse_scale
from elastico_core.workloads.shard import ResultSink, ShardRow, pending, read_shard

DEFAULT_MODEL_ROOT = Path(".elastico") / "models"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m elastico_core.workloads.infer", description=__doc__.split("\n")[0])
    p.add_argument("--workload", help="one of the 4 inference workloads (default: $ELASTICO_WORKLOAD)")
    p.add_argument("--knobs", help="JSON object; overrides $ELASTICO_KNOBS / $ELASTICO_KNOB_*")
    p.add_argument("--input", help="shard: .jsonl or .parquet with a 'prompt' column")
    p.add_argument("--synthetic", type=int, default=0, help="instead of --input: this many sonnet prompts (profiling)")
    p.add_argument("--prompt-bytes", type=int, default=96, help="--synthetic: prompt length")
    p.add_argument("--prefix-share", type=float, default=0.5, help="--synthetic: share of each prompt that all share")
    p.add_argument("--output", help="parquet to write (required unless --loop)")
    p.add_argument("--engine", choices=("auto", "cpu", "vllm"), default="auto")
    p.add_argument("--model", help="model folder (default: $ELASTICO_MODEL; CPU: .elastico/models/bytelm-<scale>)")
    p.add_argument(
        "--scale", help="CPU model size when no --model: tiny | small | full (default: $ELASTICO_SCALE or tiny)"
    )
    # vLLM engine arguments, exactly as the budget mapping emits them
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--enable-prefix-caching", dest="prefix_caching", action="store_true", default=None)
    p.add_argument("--no-enable-prefix-caching", dest="prefix_caching", action="store_false")
    p.add_argument("--device-mem-mib", type=float, default=1024.0, help="CPU engine: the virtual device memory")
    p.add_argument("--max-tokens", type=int, default=64, help="per request, unless the row says otherwise")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--stop", help="stop string")
    p.add_argument("--stop-at-newline", action="store_true", help="stop each output at its first newline")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: $ELASTICO_TORCH_THREADS)")
    p.add_argument("--flush-rows", type=int, default=32, help="write a parquet part every this many rows")
    p.add_argument("--loop", action="store_true", help="replay the shard until stopped (profiling); no output")
    p.add_argument("--max-seconds", type=float, default=0.0, help="stop (flushing what is done) after this long")
    p.add_argument("--progress-file", help="JSON-lines progress (default: $ELASTICO_PROGRESS_FILE, else stderr)")
    p.add_argument("--control-file", help="switch requests (default: $ELASTICO_CONTROL_FILE)")
    return p


def engine_config(knobs: Knobs, args: argparse.Namespace) -> EngineConfig:
    """Knobs first, then the engine arguments (which may carry a budget-capped memory fraction)."""
    return EngineConfig(
        max_num_seqs=args.max_num_seqs if args.max_num_seqs is not None else int(knobs["max_num_seqs"]),
        max_model_len=args.max_model_len if args.max_model_len is not None else int(knobs["max_model_len"]),
        gpu_memory_utilization=args.gpu_memory_utilization
        if args.gpu_memory_utilization is not None
        else float(knobs["gpu_memory_utilization"]),
        prefix_caching=args.prefix_caching if args.prefix_caching is not None else bool(knobs["prefix_caching"]),
        device_mem_mib=args.device_mem_mib,
    )


def resolve_infer_knobs(env: Mapping[str, str], workload: Workload, knobs_json: str | None) -> Knobs:
    return resolve_knobs(workload, Knobs.from_json(knobs_json) if knobs_json else knobs_from_env(env))


def default_model(scale: Scale) -> Path:
    return DEFAULT_MODEL_ROOT / f"bytelm-{scale.value}"


def ensure_cpu_model(folder: Path, scale: Scale) -> Path:
    """The CPU model folder, built from the bundled corpus first if it is not there yet."""
    from elastico_core.workloads.lm.model import META

    if not (folder / META).exists():
        from elastico_core.workloads.lm.build import build_lm

        print(f"building the CPU engine's model ({scale.value}) into {folder} ...", file=sys.stderr)
        build_lm(folder, scale)
    return folder


class _Stop(Exception):
    def __init__(self, request: int) -> None:
        super().__init__(request)
        self.request = request


@dataclass
class _Ticker:
    progress: ProgressWriter
    stop: StopRequests
    meter: MemoryMeter
    deadline: float | None = None  # time.monotonic() after which the job stops (flushing what is done)
    step: int = 0
    tokens: float = 0.0
    rows: int = 0  # finished rows (this launch)

    def __call__(self, tick: Tick) -> None:
        self.step += 1
        self.tokens += tick.tokens
        self.progress.step(
            StepEvent(self.step, self.tokens, tick.tokens, tick.dt_s, time.time(), self.meter.peak_mib(), tick.cpu_s),
            active=tick.active,
            prefill_tokens=tick.prefill_tokens,
            cached_tokens=tick.cached_tokens,
            rows=self.rows,
        )
        request = self.stop.poll()
        if self.deadline is not None and time.monotonic() >= self.deadline:
            request = max(request, CHECKPOINT)
        if request != NONE:
            raise _Stop(request)


def _requests(rows: list[ShardRow], args: argparse.Namespace, stop: str | None) -> Iterator[Request]:
    source = itertools.cycle(rows) if args.loop else iter(rows)
    for i, r in enumerate(source):
        rid = f"{r.id}#{i // len(rows)}" if args.loop else r.id
        yield Request(rid, r.prompt, r.max_tokens or args.max_tokens, stop, args.temperature, args.seed + i)


@guarded
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    env = os.environ
    workload = find_workload(args.workload or env.get(ENV_WORKLOAD), JobKind.INFER)
    knobs = resolve_infer_knobs(env, workload, args.knobs)
    cfg = engine_config(knobs, args)
    if not args.loop and not args.output:
        raise SpecError("--output is required (or --loop for profiling)", field="output")
    if args.max_tokens < 1:
        raise SpecError(f"must be >= 1, got {args.max_tokens}", field="max_tokens")
    if bool(args.input) == bool(args.synthetic):
        raise SpecError("give exactly one of --input and --synthetic", field="input")
    rows = read_shard(Path(args.input)) if args.input else synthetic_rows(args)
    if args.loop and not rows:
        raise SpecError("an empty shard cannot be looped", where=f"shard {args.input!r}")
    set_threads(args.threads if args.threads is not None else (int(env[ENV_THREADS]) if env.get(ENV_THREADS) else None))
    sink = ResultSink.open(Path(args.output), args.flush_rows) if args.output and not args.loop else None
    todo = pending(rows, sink.done) if sink else rows
    progress = ProgressWriter(_opt_path(args.progress_file, env, ENV_PROGRESS_FILE))
    stop = StopRequests(_opt_path(args.control_file, env, ENV_CONTROL_FILE))
    stop.install()
    use_vllm = args.engine == "vllm" or (args.engine == "auto" and _vllm_ready())
    meter = MemoryMeter(torch.device("cpu"))
    model_arg = args.model or env.get(ENV_MODEL)
    engine: Engine
    if use_vllm:
        from elastico_core.workloads.vllm_engine import VLLM_MODELS, VllmEngine, vllm_available

        if not vllm_available():
            raise SpecError("vLLM is not installed (pip install vllm in the pod image)", field="engine")
        model_name = model_arg or VLLM_MODELS[workload.name]
        engine = VllmEngine(model_name, cfg, seed=args.seed)
        params = 0
    else:
        from elastico_core.workloads.lm.model import load_lm

        scale = parse_scale(args.scale) if args.scale else default_scale(env, cuda=False)
        folder = Path(model_arg) if model_arg else ensure_cpu_model(default_model(scale), scale)
        model_name = str(folder)
        lm, _ = load_lm(folder)
        meter.attach(lm)
        engine = CpuEngine(lm, cfg)
        params = lm.param_count()
    progress.emit(
        "start",
        workload=workload.name,
        knobs=knobs.as_dict(),
        engine="vllm" if use_vllm else "cpu",
        engine_args={"max_num_seqs": cfg.max_num_seqs, "max_model_len": cfg.max_model_len,
                     "gpu_memory_utilization": cfg.gpu_memory_utilization, "prefix_caching": cfg.prefix_caching},
        model=model_name,
        params=params,
        slots=engine.slots,
        rows=len(rows),
        pending=len(todo),
        step=0,
        samples=0,
        pid=os.getpid(),
        memory_method=meter.method,
    )  # fmt: skip
    stop_text = "\n" if args.stop_at_newline else args.stop
    ticker = _Ticker(progress, stop, meter, time.monotonic() + args.max_seconds if args.max_seconds > 0 else None)
    outcome = "done"
    try:
        for result in engine.run(_requests(todo, args, stop_text), on_tick=ticker):
            ticker.rows += 1
            if sink is not None:
                sink.add(result)
    except _Stop as s:
        outcome = "stopped" if s.request == STOP or sink is None else "checkpointed"
    except Exception as exc:
        progress.emit("error", step=ticker.step, message=f"{type(exc).__name__}: {exc}"[:500])
        if sink is not None:
            sink.flush()
        raise
    merged = False
    if sink is not None:
        sink.flush()
        merged = outcome == "done" and sink.finish([r.id for r in rows])
    progress.emit(
        outcome, step=ticker.step, samples=ticker.tokens, rows_done=len(sink.done) if sink else 0, merged=merged
    )
    progress.close()
    return 0


def synthetic_rows(args: argparse.Namespace) -> list[ShardRow]:
    from elastico_core.workloads.prompts import synthetic_prompts

    raw = synthetic_prompts(
        args.synthetic, prompt_bytes=args.prompt_bytes, prefix_share=args.prefix_share, seed=args.seed
    )
    return [ShardRow(str(r["id"]), str(r["prompt"])) for r in raw]


def _opt_path(arg: str | None, env: Mapping[str, str], name: str) -> Path | None:
    text = arg if arg is not None else env.get(name, "")
    return Path(text) if text else None


def _vllm_ready() -> bool:
    from elastico_core.workloads.vllm_engine import vllm_available

    return vllm_available() and torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
