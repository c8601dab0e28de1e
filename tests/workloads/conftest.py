"""Fixtures for the workload tests: one thread per process (the tiny model is the session's, in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One torch thread in-process too (what the entrypoints get), restored for other test folders."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
