"""builtin:paper-mix: seeded, scaled with the cluster, bursty inference demand (CV ~ 0.87)."""

from __future__ import annotations

import numpy as np

from elastico_core.model.workload import JobKind
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.paper_mix import PaperMixConfig, demand_cv, paper_mix, request_tokens
from tests.sim.sim_helpers import need_data


def test_deterministic_and_labelled(store: ProfileStore) -> None:
    a = paper_mix(3, PaperMixConfig(gpus=16, hours=6), store=store)
    b = paper_mix(3, PaperMixConfig(gpus=16, hours=6), store=store)
    assert a == b and len(a) > 20
    assert all(j.synthetic == (j.kind is JobKind.INFER) for j in a.jobs)
    assert all(j.num_gpus == 1 for j in a.jobs if j.kind is JobKind.INFER)
    assert {j.num_gpus for j in a.jobs} <= {1, 2, 4, 8}
    assert all(60 <= j.duration_s <= 12 * 3600 for j in a.jobs if j.kind is JobKind.TRAIN)
    assert [j.submit_time_s for j in a.jobs] == sorted(j.submit_time_s for j in a.jobs)
    assert paper_mix(4, PaperMixConfig(gpus=16, hours=6), store=store) != a


def test_arrival_rate_scales_with_gpus_and_load(store: ProfileStore) -> None:
    def gpu_hours(gpus: int, load: float = 1.0) -> float:
        tr = paper_mix(0, PaperMixConfig(gpus=gpus, hours=24, load=load), store=store)
        return sum(j.duration_s * j.num_gpus for j in tr.jobs) / 3600

    small, big = gpu_hours(16), gpu_hours(64)
    assert 3.0 < big / small < 5.5
    assert 1.2 < gpu_hours(16, 1.5) / small < 1.9
    # offered load is about the cluster's capacity at the requested configurations
    assert 0.7 < big / (64 * 24) < 1.4


def test_inference_demand_is_bursty(store: ProfileStore) -> None:
    cvs = [demand_cv(paper_mix(s, PaperMixConfig(gpus=64), store=store)) for s in range(3)]
    assert 0.65 < float(np.mean(cvs)) < 1.1  # §2.2: CV 0.87


def test_zero_gpus_is_an_empty_trace(store: ProfileStore) -> None:
    assert len(paper_mix(0, PaperMixConfig(gpus=0), store=store)) == 0


def test_request_sizes_come_from_the_azure_trace_when_present() -> None:
    data = need_data("azure-llm-trace", "AzureLLMInferenceTrace_conv.csv").parents[1]
    tokens, how = request_tokens(data)
    assert tokens is not None and len(tokens) > 10_000 and "azure-llm-trace" in how
    assert 150 < tokens.mean() < 300
    assert request_tokens(None)[0] is None
