"""Checkpoint files: model, optimizer and step saved with ``torch.save``, written atomically."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from elastico_core.model.errors import SpecError

FILE = "checkpoint.pt"


def checkpoint_path(folder: Path) -> Path:
    return folder / FILE


def save(folder: Path, payload: dict[str, Any]) -> Path:
    """Write to a temporary name and rename, so a kill mid-save never leaves a torn checkpoint."""
    path = checkpoint_path(folder)
    tmp = path.with_name(f"{FILE}.tmp-{os.getpid()}")
    torch.save(payload, tmp)
    os.replace(tmp, path)
    return path


def load(folder: Path) -> dict[str, Any] | None:
    path = checkpoint_path(folder)
    if not path.exists():
        return None
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises several types for truncated or foreign files
        raise SpecError(f"unreadable checkpoint ({type(exc).__name__}: {str(exc)[:120]})", where=str(path)) from None
    if not isinstance(payload, dict) or "step" not in payload:
        raise SpecError("not an ElastiCo checkpoint (no step)", where=str(path))
    return payload
