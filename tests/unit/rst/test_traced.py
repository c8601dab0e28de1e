"""The traced cache, estimates from traces and datasheets, and the store's traced-first estimator."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from elastico_core.model.hardware import KNOWN_GPUS
from elastico_core.model.knobs import Knobs
from elastico_core.model.traced import TrainTrace, WorkGroup
from elastico_core.rst import from_trace
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.estimators import estimate
from elastico_core.rst.store import ProfileStore
from elastico_core.rst.traced import TRAINING_FILE, TracedCache
from elastico_core.rst.traced_estimator import TracedEstimator

MIB = 1 << 20
H200, A100 = KNOWN_GPUS["h200-141gb"], KNOWN_GPUS["a100-40gb"]
BERT = PAPER_WORKLOADS["bert"]


def trace(mb: int = 32, ck: bool = False, amp: bool = False, reserved_mib: int = 10_000, convs: int = 0) -> TrainTrace:
    return TrainTrace(
        workload="bert", micro_batch=mb, checkpointing=ck, amp=amp, scale="full", digest="0123456789abcdef",
        torch_version="2.13.0", params=335_000_000, samples=mb, weights_bytes=1340 * MIB, gradients_bytes=1340 * MIB,
        optimizer_bytes=2680 * MIB, batch_bytes=1 * MIB, activations_bytes=5000 * MIB, saved_bytes=4900 * MIB,
        peak_allocated_bytes=9500 * MIB, first_step_peak_bytes=8000 * MIB, reserved_bytes=reserved_mib * MIB,
        flops=mb * 262 * 10**9, bytes_moved=4e11, kernels=1500, dispatched=3800, fp32_convolutions=convs,
        work=(WorkGroup("tf32", mb * 262e9, 1e11, 700), WorkGroup("none", 0.0, 3e11, 800)),
        trace_s=1.0, traced_at="2026-12-06T00:00:00+00:00",
    )  # fmt: skip


def test_the_cache_round_trips_and_replaces_by_key(tmp_path: Path) -> None:
    cache = TracedCache(tmp_path)
    assert cache.write(train=[trace(32), trace(64)]) == 2
    cache.write(train=[trace(32, reserved_mib=11_000)])
    again = TracedCache(tmp_path)
    assert len(again.training()) == 2 and again.problems == []
    got = again.train_trace("bert", 32, False, False)
    assert got == trace(32, reserved_mib=11_000)
    assert all(json.loads(line)["source"] == "traced" for line in (tmp_path / "traced" / TRAINING_FILE).read_text().splitlines())


def test_a_bad_line_is_left_out_and_named(tmp_path: Path) -> None:
    TracedCache(tmp_path).write(train=[trace(32)])
    path = tmp_path / "traced" / TRAINING_FILE
    good = path.read_text()
    bad = json.loads(good)
    bad["micro_batch"], bad["reserved_bytes"] = 64, -5
    path.write_text(good + "not json\n" + json.dumps(bad) + "\n" + json.dumps({"workload": "bert"}) + "\n")
    cache = TracedCache(tmp_path)
    assert list(cache.training()) == [("bert", "full", 32, False, False)]
    text = " | ".join(str(p) for p in cache.problems)
    assert "line 2: not a trace" in text and "line 3: reserved_bytes must be a non-negative integer" in text
    assert "line 4: missing fields" in text and TRAINING_FILE in text


def test_memory_is_the_traced_reserve_plus_stated_constants() -> None:
    t = trace()
    parts = from_trace.memory_parts_mib(t, H200)
    assert parts == {"reserved": 10_000.0, "ddp_buckets": 0.0, "cublas_workspace": 32.0, "cudnn_autotune": 0.0,
                     "cuda_context": from_trace.CUDA_CONTEXT_MIB}  # fmt: skip
    assert from_trace.memory_parts_mib(t, A100)["cublas_workspace"] == 8.125  # before Hopper
    assert from_trace.memory_parts_mib(t, H200, dp=4)["ddp_buckets"] == 1340.0
    assert from_trace.memory_parts_mib(trace(convs=3), H200)["cudnn_autotune"] == from_trace.CUDNN_AUTOTUNE_MIB
    assert from_trace.train_memory_mib(t, H200) == pytest.approx(sum(parts.values()))


def test_time_is_the_roofline_or_the_host_whichever_is_longer() -> None:
    t = trace()
    device, host = from_trace.iteration_s(t, H200, 0.5)
    roof = max(t.work[0].flops / 494e12, t.work[0].nbytes / 4800e9) + t.work[1].nbytes / 4800e9
    assert device == pytest.approx(roof / 0.5 + 1500 * from_trace.KERNEL_MIN_S)
    assert host == pytest.approx(3800 * from_trace.HOST_OP_S)
    one = from_trace.train_throughput(t, H200, 1, 0.9, 0.5)
    assert one == pytest.approx(32 / max(device, host))
    assert from_trace.train_throughput(t, H200, 4, 0.9, 0.5) == pytest.approx(4 * 0.9**2 * one)
    assert from_trace.train_throughput(t, H200, 1, 0.9, 0.25) < one  # a lower efficiency is slower


def test_the_estimator_is_traced_where_traced_and_parametric_elsewhere(tmp_path: Path) -> None:
    TracedCache(tmp_path).write(train=[trace(32)])
    est = TracedEstimator.open(tmp_path)
    knobs = Knobs.of({"micro_batch": 32, "checkpointing": False, "amp": False, "dp": 1})
    got = est(BERT, knobs, H200)
    assert got is not None and got.provenance.startswith("traced 0123456789abcdef")
    assert got.resources.gpu_mem_mib == pytest.approx(from_trace.train_memory_mib(trace(32), H200), abs=0.1)
    other = Knobs.of({"micro_batch": 64, "checkpointing": False, "amp": False, "dp": 1})
    assert est(BERT, other, H200) == estimate(BERT, other, H200)  # no trace: the parametric estimate
    big = replace(trace(32), reserved_bytes=200_000 * MIB)
    TracedCache(tmp_path).write(train=[big])
    assert TracedEstimator.open(tmp_path)(BERT, knobs, H200) is None  # more than the device holds


def test_the_store_falls_back_to_traced_estimates(tmp_path: Path) -> None:
    TracedCache(tmp_path).write(train=[trace(32)])
    store = ProfileStore.open(tmp_path)
    knobs = Knobs.of({"micro_batch": 32, "checkpointing": False, "amp": False, "dp": 1})
    got = store.lookup(BERT, knobs, H200)
    assert got is not None and got.provenance.startswith("traced")
    store.upsert([got])  # a stored traced estimate is an estimate, not a calibrated one
    again = store.lookup(BERT, knobs, H200)
    assert again is not None and (again.throughput, again.resources, again.provenance) == (got.throughput, got.resources, got.provenance)


def test_an_inference_trace_replaces_the_catalogs_shape(tmp_path: Path) -> None:
    from elastico_core.model.traced import InferTrace

    w = PAPER_WORKLOADS["qwen-1.7b"]
    infer = InferTrace(workload=w.name, model="Qwen/Qwen3-1.7B", architecture="Qwen3ForCausalLM", digest="f" * 16,
                       params=1_720_574_976, weights_bytes=2 * 1_720_574_976, kv_bytes_per_token=114_688, layers=28,
                       kv_heads=8, head_dim=128, hidden=2048, vocab=151_936, flops_per_token=3_440_902_144,
                       attention_flops_per_token_per_context=458_752.0, trace_s=1.0, traced_at="x")  # fmt: skip
    TracedCache(tmp_path).write(infer=[infer])
    knobs = w.defaults
    got = TracedEstimator.open(tmp_path)(w, knobs, H200)
    par = estimate(w, knobs, H200)
    assert got is not None and par is not None and got.provenance.startswith("traced " + "f" * 16)
    assert got.throughput > par.throughput  # the tied embedding is stored once: fewer weight bytes to read per step
    assert math.isclose(got.resources.gpu_mem_mib, par.resources.gpu_mem_mib)  # vLLM pre-allocates its fraction
