"""The digest of the code a trace was read from: a change to it makes the cached trace stale."""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Iterable
from pathlib import Path

import torch

TRACER_MODULES = (
    "elastico_core.workloads.zoo.base",
    "elastico_core.workloads.tracing.cuda_paths",
    "elastico_core.workloads.tracing.recorder",
    "elastico_core.workloads.tracing.allocator",
    "elastico_core.workloads.tracing.train",
)


def source_digest(modules: Iterable[str], *extra: str) -> str:
    """sha256 (16 hex digits) of the named modules' source files, plus ``extra`` strings."""
    h = hashlib.sha256()
    for name in modules:
        path = Path(str(importlib.import_module(name).__file__))
        h.update(name.encode())
        h.update(path.read_bytes())
    for e in extra:
        h.update(e.encode())
    return h.hexdigest()[:16]


def training_digest(workload_module: str) -> str:
    """The digest of one zoo workload: its module, the shared zoo code, the tracer, torch's version."""
    return source_digest((workload_module, *TRACER_MODULES), torch.__version__)
