"""A virtualenv that holds only what a bare CUDA image has: torch, numpy, psutil and nvidia-ml-py.

Built by linking those distributions (and what they require, as pip would install them) from the
project's environment into a fresh ``venv``, so it costs no download. Running the measuring side in
it proves that it imports nothing else (no polars, pydantic, sqlalchemy...).
"""

from __future__ import annotations

import importlib.metadata as md
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

BARE = ("torch", "numpy", "psutil", "nvidia-ml-py")


def _closure(names: tuple[str, ...]) -> set[str]:
    seen: set[str] = set()

    def visit(name: str) -> None:
        key = name.lower().replace("_", "-")
        if key in seen:
            return
        try:
            reqs = md.requires(key) or []
        except md.PackageNotFoundError:
            return
        seen.add(key)
        for req in reqs:
            if "extra ==" in req:
                continue
            visit(re.split(r"[ ;<>=!\[~(]", req)[0].strip())

    for n in names:
        visit(n)
    return seen


def build(target: Path) -> Path:
    """Create the venv at ``target``; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(target), "platbase": str(target)}))
    site.mkdir(parents=True, exist_ok=True)
    for name in sorted(_closure(BARE)):
        dist = md.distribution(name)
        root = Path(str(dist.locate_file("")))
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            src, dst = root / top, site / top
            if src.exists() and not dst.exists() and top != "__pycache__":
                dst.symlink_to(src)
    return target / "bin" / "python"
