"""Job documents: canonical, hashed, rebuilt exactly as the CLI's parser builds them."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastico_core.model.errors import SpecError
from elastico_core.model.job import JOB_ID
from elastico_core.specs.files import load_jobs
from elastico_core.state.specs import apply_limits, build_spec, job_document, split_document
from elastico_core.state.values import ExternalIdentity

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CUSTOM = """
workloads:
  - name: tiny-mlp
    kind: train
    params: 1000000
    knobs: {micro_batch: [8, 16, 32], amp: [false, true]}
    shape: {memory_gib: [2, 4]}
jobs:
  - {id: mlp-1, workload: tiny-mlp, floor: 1}
  - {id: bert-x, workload: bert, floor: 10, knobs: {micro_batch: [32, 64]}}
"""


def test_split_matches_the_cli_parser() -> None:
    text = (EXAMPLES / "jobs.yaml").read_text()
    docs = split_document(text, "jobs.yaml")
    specs, _ = load_jobs(EXAMPLES / "jobs.yaml")
    assert [d.job_id for d in docs] == [s.id for s in specs]
    for doc, spec in zip(docs, specs, strict=True):
        assert doc.spec == spec
        assert build_spec(doc.doc) == spec


def test_custom_workload_travels_with_its_job() -> None:
    docs = {d.job_id: d for d in split_document(CUSTOM, "custom")}
    assert [w["name"] for w in docs["mlp-1"].doc["workloads"]] == ["tiny-mlp"]
    assert "workloads" not in docs["bert-x"].doc  # catalog workloads are kept by name
    assert build_spec(docs["mlp-1"].doc).workload.name == "tiny-mlp"


def test_canonical_form_ignores_spelling() -> None:
    a = job_document({"id": "j", "workload": "bert", "floor": 150, "weight": 2})
    b = job_document({"weight": 2.0, "floor": "150", "workload": "bert", "id": "j"})
    assert a.digest == b.digest and a.doc == b.doc


@pytest.mark.parametrize(
    ("job", "match"),
    [
        ({"id": "j", "workload": "nope"}, "unknown workload"),
        ({"id": "j", "workload": "bert", "floor": -1}, "floor"),
        ({"id": "j", "workload": "bert", "knobs": {"micro_batch": [3]}}, "outside the grid"),
        ({"id": "bad id", "workload": "bert"}, "ids are"),
        ({"id": "j", "workload": "bert", "colour": "red"}, "unknown field"),
        ({"id": "j", "workload": "bert", "floor": float("nan")}, "plain JSON"),
        ({"id": "j", "workload": "bert", "user": object()}, "plain JSON"),
    ],
    ids=["workload", "floor", "grid", "id", "extra-field", "nan", "object"],
)
def test_invalid_jobs_raise_one_spec_error(job: dict, match: str) -> None:
    with pytest.raises(SpecError, match=match):
        job_document(job)


def test_limits_narrow_the_space() -> None:
    spec = job_document({"id": "j", "workload": "bert"}).spec
    narrowed = apply_limits(spec, {"micro_batch": [32, 64]})
    assert {s.name: s.values for s in narrowed.knob_space}["micro_batch"] == (32, 64)
    with pytest.raises(SpecError):
        apply_limits(spec, {"micro_batch": [3]})


def test_airflow_ids_are_valid_stable_and_distinct() -> None:
    a = ExternalIdentity.airflow("my_dag", "manual__2026-01-01T00:00:00+00:00", "group.train", 3)
    b = ExternalIdentity.airflow("my_dag", "manual__2026-01-01T00:00:00+00:00", "group.train", 4)
    assert JOB_ID.match(a.derived_job_id()) and a.derived_job_id().startswith("my_dag.group.train.3-")
    assert a.derived_job_id() == ExternalIdentity.airflow("my_dag", a.run_id, a.task_id, 3).derived_job_id()
    assert a.derived_job_id() != b.derived_job_id()
    weird = ExternalIdentity.airflow("_x" * 200, "r", "t/+:é")
    assert JOB_ID.match(weird.derived_job_id())
    with pytest.raises(SpecError):
        ExternalIdentity.airflow("", "r", "t")


def test_split_document_cuts_the_same_documents_as_job_document() -> None:
    """The bulk path (one parse of the file) gives each job exactly the document, digest and spec of the
    one-job path, so a job submitted in a file and registered alone are the same registration."""
    import yaml

    from elastico_core.state.specs import job_document, split_document

    text = (Path(__file__).resolve().parents[2] / "examples" / "jobs.yaml").read_text() + """
workloads:
  - name: vit-small
    kind: train
    params: 22000000
    knobs: {micro_batch: [64, 128, 256], checkpointing: [false, true], amp: [false, true]}
    shape: {memory_gib: [6, 18], gflops_per_sample: 13.8}
  - name: unused
    kind: train
    params: 1000
    knobs: {micro_batch: [8]}
    shape: {memory_gib: [1, 2]}
"""
    text = text.replace("jobs:\n", "jobs:\n  - {id: vit-1, workload: vit-small, floor: 100, knobs: {micro_batch: [128]}}\n", 1)
    raw = yaml.safe_load(text)
    bulk = split_document(text, "jobs.yaml")
    one = [job_document(j, raw["workloads"], where="x") for j in raw["jobs"]]
    assert len(bulk) == len(one) == 12
    for a, b in zip(bulk, one, strict=True):
        assert (a.job_id, a.doc, a.digest) == (b.job_id, b.doc, b.digest)
        assert a.spec == b.spec
    dup = "workloads: [{name: w, kind: train, params: 1, knobs: {micro_batch: [1]}, shape: {memory_gib: [1, 2]}}," \
          " {name: w, kind: train, params: 2, knobs: {micro_batch: [1]}, shape: {memory_gib: [1, 2]}}]\njobs: []\n"
    with pytest.raises(SpecError):
        split_document(dup, "dup.yaml")
