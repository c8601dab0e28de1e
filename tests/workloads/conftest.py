"""Fixtures for the workload tests: one thread per process, and a tiny byte-level LM built once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

LM_STEPS = 60  # enough to beat the uniform 5.55 nats/byte by far; seconds on one thread


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One torch thread in-process too (what the entrypoints get), restored for other test folders."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from elastico_core.workloads.lm.build import build_lm
    from elastico_core.workloads.scale import Scale

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("lm") / "bytelm-tiny"
    build_lm(folder, Scale.TINY, steps=LM_STEPS)
    torch.set_num_threads(threads)
    return folder
