"""The launch contract as the workloads read it: knobs, precedence, budgets, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastico_core.model.cluster import Cluster, Node
from elastico_core.model.errors import SpecError
from elastico_core.model.hardware import gpu_model
from elastico_core.model.knobs import Knobs
from elastico_core.model.plan import Placement
from elastico_core.model.resources import ResourceVector
from elastico_core.pds.budgets import launch_settings
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.workloads.contract import check_writable_dir, find_workload, resolve_knobs, train_launch
from elastico_core.workloads.infer import engine_config, parser


def _placement(workload: str, knobs: dict[str, object], gpus: tuple[str, ...] = ("n1/0",)) -> Placement:
    return Placement(
        job_id="job-1",
        knobs=Knobs.of(knobs),  # type: ignore[arg-type]
        gpus=gpus,
        resources=ResourceVector(0.5, 20_000, 4, 16_000),
        throughput=100.0,
        predicted_slowdown=1.0,
        floor=0.0,
    )


CLUSTER = Cluster("c", (Node("n1", gpu_model("a100-80gb"), 2, 32, 256_000),))


def test_training_env_from_the_budget_mapping_round_trips() -> None:
    knobs = {"micro_batch": 64, "checkpointing": True, "amp": False, "dp": 2}
    p = _placement("resnet50", knobs, ("n1/0", "n1/1"))
    env = launch_settings(p, PAPER_WORKLOADS["resnet50"], CLUSTER).env_dict()
    launch = train_launch(env)
    assert launch.workload.name == "resnet50"
    assert launch.knobs.as_dict() == knobs
    assert launch.dp == 2 and launch.micro_batch == 64 and launch.checkpointing and not launch.amp
    assert launch.memory_fraction == pytest.approx(20_000 / 81920, abs=1e-4)
    assert launch.mem_budget_mib == 20_000


def test_inference_args_from_the_budget_mapping_override_knobs() -> None:
    knobs = {"max_num_seqs": 2, "max_model_len": 8192, "prefix_caching": True, "gpu_memory_utilization": 0.9}
    settings = launch_settings(_placement("qwen-1.7b", knobs), PAPER_WORKLOADS["qwen-1.7b"], CLUSTER)
    args = parser().parse_args(["--input", "x.jsonl", *settings.args])
    from elastico_core.workloads.infer import resolve_infer_knobs

    resolved = resolve_infer_knobs(settings.env_dict(), PAPER_WORKLOADS["qwen-1.7b"], None)
    cfg = engine_config(resolved, args, "cuda")
    assert (cfg.max_num_seqs, cfg.max_model_len, cfg.prefix_caching) == (2, 8192, True)
    assert (cfg.device, cfg.tensor_parallel_size) == ("cuda", 1)
    # the budget caps the memory fraction below the knob: the engine argument wins
    assert cfg.gpu_memory_utilization == pytest.approx(20_000 / 81920, abs=1e-3)


@pytest.mark.parametrize(
    ("env", "expect"),
    [
        ({"ELASTICO_KNOBS": '{"micro_batch": 64}', "ELASTICO_KNOB_MICRO_BATCH": "32"}, 64),
        ({"ELASTICO_KNOB_MICRO_BATCH": "32"}, 32),
        ({}, 512),
    ],
    ids=["json-wins", "per-knob", "defaults"],
)
def test_knob_precedence(env: dict[str, str], expect: int) -> None:
    launch = train_launch({"ELASTICO_WORKLOAD": "resnet50", **env})
    assert launch.micro_batch == expect


def test_arguments_override_environment() -> None:
    launch = train_launch(
        {"ELASTICO_WORKLOAD": "bert", "ELASTICO_KNOB_MICRO_BATCH": "32"},
        workload="lstm",
        knobs_json='{"micro_batch": 128}',
    )
    assert launch.workload.name == "lstm" and launch.micro_batch == 128


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workload": "resnet18"}, "unknown train workload 'resnet18'"),
        ({"workload": "qwen-1.7b"}, "unknown train workload 'qwen-1.7b'"),
        ({"workload": "resnet50", "knobs_json": '{"batch": 64}'}, "unknown knob 'batch'"),
        (
            {"workload": "resnet50", "knobs_json": '{"micro_batch": 48}'},
            "knobs.micro_batch: value 48 is outside the grid",
        ),
        ({"workload": "resnet50", "knobs_json": '{"amp": 1}'}, "knobs.amp: value 1 is outside the grid"),
        ({"workload": "resnet50", "knobs_json": "{micro_batch: 4}"}, "knobs are not valid JSON"),
        ({"workload": "bert", "knobs_json": '{"micro_batch": 512}'}, "outside the grid [32, 64, 128]"),
    ],
    ids=["unknown-workload", "wrong-kind", "unknown-knob", "off-grid", "bool-vs-int", "bad-json", "bert-grid"],
)
def test_bad_knobs_name_the_culprit(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(SpecError) as err:
        train_launch({}, **kwargs)
    assert message in str(err.value)


def test_dp_env_must_agree_with_the_knob() -> None:
    with pytest.raises(SpecError, match="ELASTICO_DP=4 disagrees with the knob dp=2"):
        train_launch({"ELASTICO_WORKLOAD": "lstm", "ELASTICO_KNOBS": '{"dp": 2}', "ELASTICO_DP": "4"})
    assert train_launch({"ELASTICO_WORKLOAD": "lstm", "ELASTICO_DP": "4"}).dp == 4


def test_memory_fraction_is_checked() -> None:
    with pytest.raises(SpecError, match="ELASTICO_MEMORY_FRACTION"):
        train_launch({"ELASTICO_WORKLOAD": "lstm", "ELASTICO_MEMORY_FRACTION": "1.5"})


def test_resolve_completes_with_defaults_and_keeps_grid_types() -> None:
    w = find_workload("deepseek-1.5b")
    knobs = resolve_knobs(w, {"max_num_seqs": 2.0, "prefix_caching": True})
    assert knobs.as_dict() == {
        "gpu_memory_utilization": 0.9,
        "max_model_len": 16384,
        "max_num_seqs": 2,
        "prefix_caching": True,
    }
    assert isinstance(knobs["max_num_seqs"], int)


def test_unwritable_checkpoint_dir_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = blocker / "ckpt"
    with pytest.raises(SpecError) as err:
        check_writable_dir(target, "checkpoint dir")
    assert str(target) in str(err.value) and "not writable" in str(err.value)
    check_writable_dir(tmp_path / "fine" / "ckpt", "checkpoint dir")
    assert not any((tmp_path / "fine" / "ckpt").iterdir())
