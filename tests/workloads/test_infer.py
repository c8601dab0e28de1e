"""Batch inference: the CPU engine's knobs, outputs a person can check, shards, resume, vLLM mapping."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from elastico_core.model.errors import SpecError
from elastico_core.profiling.tail import read_events
from elastico_core.workloads.cpu_engine import CpuEngine, EngineConfig, Request
from elastico_core.workloads.infer import main
from elastico_core.workloads.lm.corpus import lines
from elastico_core.workloads.lm.model import load_lm
from elastico_core.workloads.prompts import synthetic_prompts
from elastico_core.workloads.shard import parts_dir, read_shard
from tests.workloads.wl_helpers import clean_env

INFER = "elastico_core.workloads.infer"


def _shard(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _requests(n: int = 8, max_tokens: int = 24) -> list[Request]:
    return [Request(str(r["id"]), str(r["prompt"]), max_tokens) for r in synthetic_prompts(n, prompt_bytes=96, seed=2)]


def test_the_model_learned_its_corpus(tiny_lm: Path) -> None:
    _, meta = load_lm(tiny_lm)
    assert meta["loss"] < 3.5  # nats/byte; uniform guessing is ln 256 = 5.55
    assert meta["corpus_sha256"] and "sonnets" in str(meta["corpus"])


def test_prefix_caching_reuses_kv_and_changes_nothing_else(tiny_lm: Path) -> None:
    model, _ = load_lm(tiny_lm)
    reqs = _requests()
    plain = CpuEngine(model, EngineConfig(4, 4096, 0.9, prefix_caching=False))
    cached = CpuEngine(model, EngineConfig(4, 4096, 0.9, prefix_caching=True))
    a = {r.id: r for r in plain.run(reqs)}
    b = {r.id: r for r in cached.run(reqs)}
    assert {k: v.output for k, v in a.items()} == {k: v.output for k, v in b.items()}  # same tokens, greedy
    assert plain.cached_tokens == 0 and cached.cached_tokens > 0
    assert cached.prefill_tokens + cached.cached_tokens == plain.prefill_tokens
    assert all(r.cached_tokens > 0 for r in list(b.values())[1:])


def test_max_num_seqs_bounds_the_batch(tiny_lm: Path) -> None:
    model, _ = load_lm(tiny_lm)
    for seqs in (1, 2, 4):
        engine = CpuEngine(model, EngineConfig(seqs, 1024, 0.9, prefix_caching=False))
        active: list[int] = []
        results = list(engine.run(_requests(), on_tick=lambda t, seen=active: seen.append(t.active)))
        assert len(results) == 8 and max(active) <= seqs and engine.slots == seqs
    batched = CpuEngine(model, EngineConfig(4, 1024, 0.9, prefix_caching=False))
    single = CpuEngine(model, EngineConfig(1, 1024, 0.9, prefix_caching=False))
    assert [r.output for r in sorted(batched.run(_requests()), key=lambda r: r.id)] == [
        r.output for r in sorted(single.run(_requests()), key=lambda r: r.id)
    ]


def test_max_model_len_caps_prompt_plus_output(tiny_lm: Path) -> None:
    model, _ = load_lm(tiny_lm)
    engine = CpuEngine(model, EngineConfig(2, 64, 0.9, prefix_caching=False))
    long_prompt = "x" * 80
    short = "Shall I compare thee to a "
    out = {r.id: r for r in engine.run([Request("long", long_prompt, 10), Request("short", short, 100)])}
    assert out["long"].finish_reason == "error" and "max_model_len 64" in out["long"].error
    assert out["short"].finish_reason == "length" and out["short"].prompt_tokens + out["short"].output_tokens == 64


def test_gpu_memory_utilization_sizes_the_kv_pool(tiny_lm: Path) -> None:
    model, _ = load_lm(tiny_lm)
    big = CpuEngine(model, EngineConfig(4, 4096, 0.9, prefix_caching=True, device_mem_mib=256))
    small = CpuEngine(model, EngineConfig(4, 4096, 0.4, prefix_caching=True, device_mem_mib=256))
    assert big.prefix.capacity_blocks > small.prefix.capacity_blocks
    tight = CpuEngine(model, EngineConfig(4, 16384, 0.4, prefix_caching=False, device_mem_mib=128))
    assert tight.slots < 4  # like vLLM, fewer concurrent sequences fit
    with pytest.raises(SpecError, match="max_model_len 16384 needs"):
        CpuEngine(model, EngineConfig(1, 16384, 0.05, prefix_caching=False, device_mem_mib=128))


def test_entrypoint_writes_parquet_a_person_can_check(tiny_lm: Path, tmp_path: Path) -> None:
    verse = lines()
    rows = [{"id": f"r{i}", "prompt": "\n".join(verse[i : i + 3]) + "\n" + verse[i + 3][:12]} for i in range(6)]
    shard = _shard(tmp_path / "shard.jsonl", rows)
    out = tmp_path / "out.parquet"
    progress = tmp_path / "p.jsonl"
    code = main(["--workload", "qwen-1.7b", "--input", str(shard), "--output", str(out), "--model", str(tiny_lm),
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
    assert events[0]["engine"] == "cpu" and events[0]["engine_args"]["max_num_seqs"] == 2  # type: ignore[index]
    steps = [e for e in events if e["event"] == "step"]
    assert sum(e["n"] for e in steps) == df["output_tokens"].sum()  # type: ignore[misc]
    assert events[-1]["event"] == "done" and events[-1]["merged"] is True
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


def test_bad_knobs_and_model_are_named(tiny_lm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shard = _shard(tmp_path / "s.jsonl", [{"prompt": "x"}])
    base = ["--input", str(shard), "--output", str(tmp_path / "o.parquet"), "--model", str(tiny_lm)]
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
    assert f"model '{tmp_path}': no byte-level LM here" in capsys.readouterr().err


def test_partial_results_survive_a_kill_and_the_relaunch_skips_them(tiny_lm: Path, tmp_path: Path) -> None:
    rows = synthetic_prompts(40, prompt_bytes=96, seed=5)
    shard = _shard(tmp_path / "shard.jsonl", rows)
    out, progress = tmp_path / "out.parquet", tmp_path / "p.jsonl"
    args = [sys.executable, "-m", INFER, "--workload", "deepseek-1.5b", "--input", str(shard), "--output", str(out),
            "--model", str(tiny_lm), "--knobs", '{"max_num_seqs": 1}', "--max-tokens", "48", "--flush-rows", "4",
            "--progress-file", str(progress)]  # fmt: skip
    proc = subprocess.Popen(args, env=clean_env(), stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(list(parts_dir(out).glob("part-*.parquet"))) < 2:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # no chance to flush: only what was written survives
    proc.wait(timeout=30)
    done = pl.concat([pl.read_parquet(p) for p in parts_dir(out).glob("part-*.parquet")])
    assert 8 <= done.height < 40 and not out.exists()

    assert main([*args[3:], "--threads", "1"]) == 0
    events = read_events(progress)
    restart = [e for e in events if e["event"] == "start"][-1]
    assert restart["pending"] == 40 - done.height
    final = pl.read_parquet(out)
    assert final["id"].to_list() == [r["id"] for r in rows]  # every row once, in input order
    kept = final.filter(pl.col("id").is_in(done["id"].to_list())).sort("id")
    assert kept["output"].to_list() == done.sort("id")["output"].to_list()  # finished rows were not redone


def test_sigterm_flushes_finished_rows(tiny_lm: Path, tmp_path: Path) -> None:
    shard = _shard(tmp_path / "shard.jsonl", synthetic_prompts(40, prompt_bytes=96, seed=6))
    out, progress = tmp_path / "out.parquet", tmp_path / "p.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", INFER, "--workload", "qwen-1.7b", "--input", str(shard), "--output", str(out),
         "--model", str(tiny_lm), "--max-tokens", "48", "--flush-rows", "1000", "--progress-file", str(progress)],
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


def test_engine_arguments_match_vllm() -> None:
    vllm = pytest.importorskip(
        "vllm",
        reason="vLLM is not installed: it needs multi-GB CUDA wheels and pins another torch (see docs/profiling.md)",
    )
    from vllm.engine.arg_utils import EngineArgs

    from elastico_core.workloads.vllm_engine import engine_kwargs

    cfg = EngineConfig(2, 8192, 0.45, prefix_caching=True)
    args = EngineArgs(model="facebook/opt-125m", **engine_kwargs(cfg))
    assert (args.max_num_seqs, args.max_model_len, args.gpu_memory_utilization, args.enable_prefix_caching) == (
        2,
        8192,
        0.45,
        True,
    )
    from vllm.utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    parsed = EngineArgs.from_cli_args(parser.parse_args(["--model", "m", "--max-num-seqs=2", "--max-model-len=8192",
                                                         "--gpu-memory-utilization=0.450", "--enable-prefix-caching"]))  # fmt: skip
    assert (parsed.max_num_seqs, parsed.max_model_len, parsed.gpu_memory_utilization, parsed.enable_prefix_caching) == (
        2,
        8192,
        0.45,
        True,
    )
    assert vllm.__version__
