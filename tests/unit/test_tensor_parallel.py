"""Tensor-parallel inference: the knob, its bounds, the estimates, one-node gangs, launch settings, traces."""

from __future__ import annotations

import pytest

from elastico_core.bench.instances import make_cluster
from elastico_core.model.errors import SpecError
from elastico_core.model.hardware import KNOWN_GPUS
from elastico_core.model.job import JobSpec, gang_size, narrow_space
from elastico_core.model.knobs import TP_KNOB, Knobs
from elastico_core.profiling.configs import resolve_knobs
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.rst.estimators import estimate
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.policy import PolicyContext, PolicyKind
from elastico_core.sim.registry import default_registry
from elastico_core.sim.simulator import simulate
from elastico_core.sim.truth import ContentionPredictor
from tests.sim.sim_helpers import make_trace

LLAMA = PAPER_WORKLOADS["llama-3-7b"]
A100 = KNOWN_GPUS["a100-40gb"]


def test_a_multi_gpu_inference_job_gets_the_knob_up_to_its_gpus() -> None:
    one = JobSpec("one", LLAMA)
    four = JobSpec("four", LLAMA, max_gpus=4)
    assert TP_KNOB not in {s.name for s in one.knob_space}  # a 1-GPU job keeps Table 2's knobs
    (tp,) = [s for s in four.knob_space if s.name == TP_KNOB]
    assert tp.values == (1, 2, 4) and four.default_knobs[TP_KNOB] == 4 and gang_size(four.default_knobs) == 4
    assert JobSpec("six", LLAMA, max_gpus=6).default_knobs[TP_KNOB] == 4  # powers of two only


@pytest.mark.parametrize(
    ("value", "gpus", "message"),
    [(3, 4, "3 is not a power of two in [1, 2, 4, 8]"), (8, 4, "8 exceeds the job's gpus (4)"),
     (2, 1, "2 exceeds the job's gpus (1)"), ("two", 4, "'two' is not a power of two in [1, 2, 4, 8]")],
)
def test_bad_tensor_parallel_sizes_name_the_job_and_the_knob(value: object, gpus: int, message: str) -> None:
    with pytest.raises(SpecError) as err:
        narrow_space(LLAMA, {TP_KNOB: value}, gpus, where="job 'serve'")  # type: ignore[dict-item]
    assert str(err.value) == f"job 'serve': knobs.tensor_parallel_size: {message}"


def test_sharding_lowers_memory_per_gpu_and_raises_throughput() -> None:
    base = LLAMA.defaults.with_(gpu_memory_utilization=0.9, max_model_len=4096, max_num_seqs=4)
    profiles = [estimate(LLAMA, base.with_(tensor_parallel_size=t), A100) for t in (1, 2, 4, 8)]
    assert all(p is not None for p in profiles)
    tputs = [p.throughput for p in profiles if p is not None]
    assert tputs == sorted(tputs) and tputs[-1] < 8 * tputs[0]  # more GPUs help, sub-linearly
    # weights no longer fit one GPU at a low fraction, but do when sharded over 4
    tight = base.with_(gpu_memory_utilization=0.4, max_model_len=4096)  # 16 GiB: 15 GiB of weights
    assert estimate(LLAMA, tight, A100) is None and estimate(LLAMA, tight.with_(tensor_parallel_size=4), A100)


def test_the_entrypoint_accepts_the_knob_and_keeps_tp1_as_the_paper_key() -> None:
    assert resolve_knobs(LLAMA, {TP_KNOB: 4})[TP_KNOB] == 4
    assert TP_KNOB not in resolve_knobs(LLAMA, {TP_KNOB: 1})
    with pytest.raises(SpecError, match="outside the grid"):
        resolve_knobs(LLAMA, {TP_KNOB: 3})
    with pytest.raises(SpecError, match="unknown knob 'tensor_parallel_size'"):
        resolve_knobs(PAPER_WORKLOADS["bert"], {TP_KNOB: 2})


def test_the_short_form_shows_tp_only_above_one() -> None:
    assert "tp=4" in Knobs.of({TP_KNOB: 4, "max_num_seqs": 2}).short()
    assert "tp" not in Knobs.of({TP_KNOB: 1, "max_num_seqs": 2}).short()


@pytest.mark.parametrize("kind", [PolicyKind.ELASTICO, PolicyKind.VOLCANO, PolicyKind.LUCID])
def test_a_trace_with_multi_gpu_inference_rows_simulates(store: ProfileStore, kind: PolicyKind) -> None:
    rows = [("serve", 0, 600, 4, "infer", "llama-3-7b"), ("label", 10, 300, 1, "infer", "qwen-1.7b"),
            ("train", 5, 600, 2, "train", "resnet50"), ("eval", 20, 300, 3, "infer", "mistral-7b")]
    pol = default_registry().get(kind)(PolicyContext(store, ContentionPredictor()))
    cluster = make_cluster(8)
    result = simulate(make_trace(rows), pol, cluster, 0, store=store)
    assert {j.job_id for j in result.jobs} == {"serve", "label", "train", "eval"}
    assert all(j.finish_s > j.first_start_s >= 0 for j in result.jobs)  # every job ran to the end
