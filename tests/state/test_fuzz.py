"""Hostile job specs through the service: only ``SpecError`` escapes, and nothing already accepted is lost."""

from __future__ import annotations

import itertools
import math
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastico_core.model.errors import SpecError
from elastico_core.state import ExternalIdentity, JobService, JobStatus

WORKLOADS = ["bert", "resnet50", "lstm", "qwen-1.7b", "mistral-7b", "tiny", "", "BERT", "nope"]
KNOBS = ["micro_batch", "checkpointing", "amp", "dp", "max_num_seqs", "max_model_len", "prefix_caching",
         "gpu_memory_utilization", "colour"]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from([32, 64, 128, 0.9, 4096, "true", "1e-05"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=8)
knob_maps = st.dictionaries(st.sampled_from(KNOBS), st.one_of(values, st.lists(st.sampled_from([8, 16, 32, 64, 128, True, False, 0.5, 0.7, 4096]), max_size=4)), max_size=4)
shapes = st.dictionaries(st.sampled_from(["memory_gib", "gflops_per_sample", "layers", "kv_heads", "head_dim", "bogus"]), values, max_size=3)
workload_docs = st.fixed_dictionaries(
    {"name": st.sampled_from(["tiny", "bert", "Bad Name", "tiny2"]), "kind": st.sampled_from(["train", "infer", "other"]),
     "params": st.one_of(st.integers(-5, 10**9), values)},
    optional={"knobs": knob_maps, "shape": shapes, "defaults": knob_maps, "unit": values},
)
job_docs = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(st.text(max_size=20), values), "workload": st.one_of(st.sampled_from(WORKLOADS), values),
        "floor": values, "weight": values, "work": values, "gpus": st.one_of(st.integers(-2, 2000), values),
        "knobs": st.one_of(knob_maps, values), "submit_time_s": values, "user": values, "priority": values,
        "labels": st.one_of(st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2), values),
        "extra": values,
    },
)
valid_jobs = st.fixed_dictionaries(
    {"id": st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True), "workload": st.sampled_from(["bert", "lstm", "qwen-1.7b", "ncf"])},
    optional={"floor": st.floats(0, 500), "weight": st.floats(0.1, 5), "gpus": st.integers(1, 8), "priority": st.integers(-3, 3),
              "user": st.text(max_size=8), "work": st.floats(1, 1e9)},
)
job_docs = st.one_of(valid_jobs, job_docs)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _assert_kept(service: JobService, accepted: dict[str, str]) -> None:
    views = service.get_many(accepted)
    assert {j: v.spec_hash for j, v in views.items()} == accepted, "an accepted job changed or vanished"
    assert all(v.status is JobStatus.PENDING for v in views.values())


def test_fuzzed_registrations(state_url: str) -> None:
    service = JobService.open(state_url)
    accepted: dict[str, str] = {}
    counter = itertools.count()

    @SETTINGS
    @given(job=job_docs, workloads=st.lists(workload_docs, max_size=2))
    def attempt(job: dict[str, Any], workloads: list[dict[str, Any]]) -> None:
        ident = ExternalIdentity.airflow("fuzz", f"run-{next(counter)}", "task")
        try:
            result = service.register(job, ident, workloads=workloads)
        except SpecError as exc:
            assert "\n" not in str(exc), "validation errors are one line"
        else:
            assert result.created and math.isfinite(result.job.priority)
            accepted[result.job.id] = result.job.spec_hash
        if len(accepted) % 5 == 0:
            _assert_kept(service, accepted)

    try:
        attempt()
        _assert_kept(service, accepted)
        assert len(accepted) >= 5, "the fuzzer should also produce valid specs"
    finally:
        service.close()


def test_fuzzed_job_files(state_url: str) -> None:
    service = JobService.open(state_url)
    accepted: dict[str, str] = {}
    counter = itertools.count()

    @SETTINGS
    @given(jobs=st.lists(job_docs, max_size=3), workloads=st.lists(workload_docs, max_size=2), raw=st.text(max_size=80),
           use_raw=st.booleans())
    def attempt(jobs: list[dict[str, Any]], workloads: list[dict[str, Any]], raw: str, use_raw: bool) -> None:
        n = next(counter)
        for i, job in enumerate(jobs):  # unique ids so that only validation can refuse
            if isinstance(job.get("id"), str):
                job["id"] = f"f{n}x{i}-{job['id']}"
        if use_raw:
            text = raw
        else:
            try:
                text = yaml.safe_dump({"workloads": workloads, "jobs": jobs})
            except yaml.YAMLError:
                text = raw
        try:
            results = service.submit_document(text, f"fuzz-{n}.yaml")
        except SpecError as exc:
            assert "\n" not in str(exc)
        else:
            for r in results:
                accepted[r.job.id] = r.job.spec_hash
        if n % 10 == 0:
            _assert_kept(service, accepted)

    try:
        attempt()
        _assert_kept(service, accepted)
    finally:
        service.close()
