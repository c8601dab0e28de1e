"""Fixtures of the simulator tests."""

from __future__ import annotations

import pytest

from elastico_core.rst.store import ProfileStore
from tests.sim.sim_helpers import REPO


@pytest.fixture(scope="session")
def store() -> ProfileStore:
    return ProfileStore.open(REPO / "profiles")
