"""Shared fixtures: the shipped profile store, small clusters, and hypothesis settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from elastico_core.bench.instances import make_cluster
from elastico_core.model.cluster import Cluster
from elastico_core.rst.store import ProfileStore

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

settings.register_profile(
    "ci", max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "60")), deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("ci")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The public data sets beside the project; tests that need them skip when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("public data folder ../shared/data is absent (see README: Data)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama model vLLM runs on CPU in the tests, built once per session (about 10 s)."""
    from elastico_core.workloads.tiny_model import ensure_tiny_model

    return ensure_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def store() -> ProfileStore:
    """The estimated profiles shipped in profiles/ (read-only: tests never write there)."""
    return ProfileStore.open(REPO / "profiles")


@pytest.fixture()
def empty_store(tmp_path: Path) -> ProfileStore:
    return ProfileStore.open(tmp_path / "profiles")


@pytest.fixture(scope="session")
def cluster8() -> Cluster:
    return make_cluster(8)


@pytest.fixture(scope="session")
def cluster2() -> Cluster:
    return make_cluster(2)
