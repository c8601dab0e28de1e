"""Table 2's grids exactly, and the estimators calibrated to Table 2 and §5.4 Case 1."""

from __future__ import annotations

import itertools

import pytest

from elastico_core.model import KNOWN_GPUS, Knobs, cartesian
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.estimators import estimate

A100 = KNOWN_GPUS["a100-40gb"]
GIB = 1024.0

# workload -> (micro-batch grid or (seqs, lengths, mu range), Table 2 memory range in GB)
TRAIN_GRIDS = {
    "resnet50": ((32, 64, 128, 256, 512), (12, 24)),
    "bert": ((32, 64, 128), (24, 36)),
    "dcgan": ((32, 64, 128, 256, 512), (8, 16)),
    "pointnet": ((32, 64, 128, 256, 512), (12, 20)),
    "transformer": ((32, 64, 128, 256, 512), (20, 38)),
    "lstm": ((32, 64, 128, 256, 512, 1024, 2048, 4096), (4, 12)),
    "ncf": ((32, 64, 128, 256, 512, 1024, 2048, 4096, 8192), (4, 16)),
    "ppo": ((32, 64, 128, 256, 512, 1024, 2048, 4096), (8, 24)),
}
INFER_GRIDS = {
    "deepseek-1.5b": ((4096, 8192, 16384), (0.4, 0.9), (16, 36)),
    "qwen-1.7b": ((4096, 8192, 16384), (0.4, 0.9), (16, 36)),
    "mistral-7b": ((1024, 2048, 4096), (0.7, 0.9), (28, 36)),
    "llama-3-7b": ((1024, 2048, 4096), (0.7, 0.9), (28, 36)),
}


def _grid(workload: str, knob: str) -> tuple:
    return PAPER_WORKLOADS[workload].knob(knob).values


def test_twelve_workloads() -> None:
    assert set(PAPER_WORKLOADS) == set(TRAIN_GRIDS) | set(INFER_GRIDS)


@pytest.mark.parametrize("name", sorted(TRAIN_GRIDS))
def test_training_grid_is_table_2(name: str) -> None:
    batches, _ = TRAIN_GRIDS[name]
    assert _grid(name, "micro_batch") == batches
    assert _grid(name, "checkpointing") == (False, True)
    assert _grid(name, "amp") == (False, True)
    assert _grid(name, "dp") == (1, 2, 4, 8)


@pytest.mark.parametrize("name", sorted(INFER_GRIDS))
def test_inference_grid_is_table_2(name: str) -> None:
    lengths, (lo, hi), _ = INFER_GRIDS[name]
    assert _grid(name, "max_num_seqs") == (1, 2, 4)
    assert _grid(name, "max_model_len") == lengths
    assert _grid(name, "prefix_caching") == (False, True)
    mu = _grid(name, "gpu_memory_utilization")
    assert mu[0] == lo and mu[-1] == hi
    assert all(abs((b - a) - 0.05) < 1e-9 for a, b in itertools.pairwise(mu))
    # 12-198 configurations per workload (§2.3): the inference grids are the large ones
    assert PAPER_WORKLOADS[name].space_size in (198, 90)


@pytest.mark.parametrize("name", sorted({**TRAIN_GRIDS, **INFER_GRIDS}))
def test_memory_range_matches_table_2(name: str) -> None:
    w = PAPER_WORKLOADS[name]
    rng = TRAIN_GRIDS[name][1] if name in TRAIN_GRIDS else INFER_GRIDS[name][2]
    mems = [p.resources.gpu_mem_mib / GIB for k in cartesian(w.knobs) if k.get("dp", 1) == 1 and (p := estimate(w, k, A100))]
    assert min(mems) == pytest.approx(rng[0], abs=1.0)
    assert max(mems) == pytest.approx(rng[1], abs=0.25)


def test_case_1_anchors() -> None:
    bert, resnet = PAPER_WORKLOADS["bert"], PAPER_WORKLOADS["resnet50"]

    def gib(w, **changes):  # type: ignore[no-untyped-def]
        p = estimate(w, w.defaults.with_(**changes), A100)
        assert p is not None
        return p.resources.gpu_mem_mib / GIB

    assert gib(bert) == pytest.approx(36, abs=0.05)
    assert gib(bert, checkpointing=True) == pytest.approx(24, abs=0.05)
    assert gib(resnet) == pytest.approx(24, abs=0.05)
    assert gib(resnet, amp=True) == pytest.approx(14, abs=0.05)
    # default configurations cannot share a 40-GB GPU; reshaped they can (Case 1)
    usable = (A100.memory_mib - 512) / GIB
    assert gib(bert) + gib(resnet) > usable
    assert gib(bert, checkpointing=True) + gib(resnet, amp=True) <= usable


def test_knob_effects_have_the_right_sign() -> None:
    w = PAPER_WORKLOADS["resnet50"]
    base = Knobs.of({"micro_batch": 128, "checkpointing": False, "amp": False, "dp": 1})
    p = estimate(w, base, A100)
    ck = estimate(w, base.with_(checkpointing=True), A100)
    amp = estimate(w, base.with_(amp=True), A100)
    big = estimate(w, base.with_(micro_batch=512), A100)
    dp2 = estimate(w, base.with_(dp=2), A100)
    assert p and ck and amp and big and dp2
    assert ck.resources.gpu_mem_mib < p.resources.gpu_mem_mib and ck.throughput < p.throughput
    assert amp.resources.gpu_mem_mib < p.resources.gpu_mem_mib and amp.throughput > p.throughput
    assert big.throughput > p.throughput and big.resources.sm > p.resources.sm
    assert p.throughput < dp2.throughput < 2 * p.throughput  # sub-linear data parallelism


def test_faster_gpus_are_faster_and_vllm_preallocates() -> None:
    w = PAPER_WORKLOADS["qwen-1.7b"]
    k = w.defaults
    a100 = estimate(w, k, KNOWN_GPUS["a100-40gb"])
    h200 = estimate(w, k, KNOWN_GPUS["h200-141gb"])
    assert a100 and h200 and h200.throughput > a100.throughput
    assert a100.resources.gpu_mem_mib == pytest.approx(0.9 * 40960, rel=1e-6)
    assert h200.resources.gpu_mem_mib == pytest.approx(0.9 * 143771, rel=1e-6)


def test_infeasible_vllm_configuration_is_none() -> None:
    w = PAPER_WORKLOADS["llama-3-7b"]
    # 8B weights (16 GB) do not leave a KV cache in 0.4 of a 40-GB GPU (the grid stops at 0.7)
    assert estimate(w, w.defaults.with_(gpu_memory_utilization=0.4), A100) is None
