"""How the profiler launches a job (the launch contract) and names the hardware it measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastico_core.model.errors import SpecError
from elastico_core.model.knobs import Knobs
from elastico_core.model.launch import parse_knob_env
from elastico_core.profiling.gpu_probe import GpuSample, open_probe
from elastico_core.profiling.launcher import Device, JobSpecLaunch, build_command
from elastico_core.profiling.signature import cpu_signature, gpu_signature, parse_cpus
from elastico_core.rst.catalog import PAPER_WORKLOADS


def test_training_launch_uses_the_contract(tmp_path: Path) -> None:
    knobs = Knobs.of({"micro_batch": 64, "checkpointing": True, "amp": False, "dp": 1})
    argv, env = build_command(JobSpecLaunch(PAPER_WORKLOADS["lstm"], knobs, "tiny", Device((0,)), 1), tmp_path)
    assert argv[-4:-2] == ["-m", "elastico_core.workloads.train"] or "elastico_core.workloads.train" in argv
    assert parse_knob_env(env) == knobs
    assert env["ELASTICO_KNOB_CHECKPOINTING"] == "true" and env["ELASTICO_DP"] == "1"
    assert env["ELASTICO_TORCH_THREADS"] == "1" and env["ELASTICO_PROGRESS_FILE"].endswith("progress.jsonl")


def test_inference_launch_loops_a_synthetic_shard(tmp_path: Path) -> None:
    knobs = Knobs.of({"max_num_seqs": 2, "max_model_len": 4096, "prefix_caching": True, "gpu_memory_utilization": 0.9})
    spec = JobSpecLaunch(PAPER_WORKLOADS["qwen-1.7b"], knobs, "tiny", Device((0,)), 1, Path("/m"), max_seconds=300)
    argv, env = build_command(spec, tmp_path)
    assert "--loop" in argv and argv[argv.index("--synthetic") + 1] == "256" and env["ELASTICO_MODEL"] == "/m"
    assert argv[argv.index("--prefix-share") + 1] == "0.5" and argv[argv.index("--max-seconds") + 1] == "300"
    assert parse_knob_env(env) == knobs


def test_scales_are_one_list() -> None:
    from elastico_core.model.launch import SCALES
    from elastico_core.workloads.scale import Scale

    assert tuple(s.value for s in Scale) == SCALES


def test_cpu_signature_names_the_device() -> None:
    sig = cpu_signature(1)
    assert sig.gpu.startswith("cpu-") and sig.driver == "1c" and sig.framework.startswith("torch-")
    assert sig.gpu_mem_mib > 0


class FakeProbe:
    """A stand-in for the profiler's own GpuProbe interface (not an imitation of NVML)."""

    def __init__(self, name: str) -> None:
        self.name, self.total_mib, self.driver = name, 143771.0, "570.86"

    def sample(self, pids: set[int]) -> GpuSample:
        return GpuSample()

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("name", "expect"), [("NVIDIA H200", "h200-141gb"), ("NVIDIA L4", "l4")])
def test_gpu_signature_uses_canonical_names(name: str, expect: str) -> None:
    sig = gpu_signature(FakeProbe(name), "vllm")
    assert (sig.gpu, sig.gpu_mem_mib, sig.driver) == (expect, 143771, "570.86") and sig.framework.startswith("vllm-")


def test_no_nvml_means_cpu_profiling() -> None:
    assert open_probe(0) is None  # this machine has no NVIDIA driver: the CPU path is the one under test


def test_core_lists_are_checked() -> None:
    assert parse_cpus("0") == (0,)
    with pytest.raises(SpecError, match="not a core list"):
        parse_cpus("zero")
    with pytest.raises(SpecError, match="not available"):
        parse_cpus("4096")
