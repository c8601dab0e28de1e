"""Options and helpers shared by the CLI modules."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

REPO_PROFILES = Path(__file__).resolve().parents[2] / "profiles"

stdout = Console()
stderr = Console(stderr=True)


def default_profiles() -> Path:
    """``$ELASTICO_PROFILES``, else ./profiles, else the profiles shipped beside the package."""
    env = os.environ.get("ELASTICO_PROFILES")
    if env:
        return Path(env)
    local = Path("profiles")
    return local if local.is_dir() else REPO_PROFILES


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=_default) + "\n")


def _default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
