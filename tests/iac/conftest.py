"""Shared fixtures of the IAC tests: the public Gavel table (skipped when absent) and small datasets."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True, scope="session")
def _few_threads() -> None:
    """The machine is shared: torch uses one thread in tests (results are seeded per thread count)."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def gavel_path(shared_data: Path) -> Path:
    path = shared_data / "gavel" / "physical_cluster_throughputs.json"
    if not path.exists():
        pytest.skip("public data not present: ../shared/data/gavel/physical_cluster_throughputs.json")
    return path


@pytest.fixture(scope="session")
def synthetic_small():  # type: ignore[no-untyped-def]
    from elastico_core.iac.synthetic import generate

    return generate(160, seed=3)
