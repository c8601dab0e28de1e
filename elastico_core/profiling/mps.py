"""NVIDIA MPS for co-location runs: start a private control daemon for the pair, quit it afterwards.

Used only on a GPU where ``nvidia-cuda-mps-control`` exists; a daemon the node already runs (its pipe
directory in ``CUDA_MPS_PIPE_DIRECTORY``) is used as is. Without MPS the pair time-slices the GPU,
which the run records (``mps`` param) so the dataset says how it was measured.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

from elastico_core.profiling.launcher import Device

CONTROL = "nvidia-cuda-mps-control"


@contextlib.contextmanager
def mps_session(device: Device, enabled: bool = True) -> Iterator[tuple[tuple[str, str], ...] | None]:
    """Yields the env the two clients need (empty when a node daemon serves them), or None without MPS."""
    control = shutil.which(CONTROL)
    if device.gpu is None or not enabled or control is None:
        yield None
        return
    if os.environ.get("CUDA_MPS_PIPE_DIRECTORY"):
        yield ()
        return
    root = tempfile.mkdtemp(prefix="elastico-mps-")
    env = {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(root, "pipe"), "CUDA_MPS_LOG_DIRECTORY": os.path.join(root, "log")}
    for path in env.values():
        os.makedirs(path, exist_ok=True)
    full = {**os.environ, **env, "CUDA_VISIBLE_DEVICES": str(device.gpu)}
    started = subprocess.run([control, "-d"], env=full, capture_output=True, timeout=30).returncode == 0
    try:
        yield tuple(env.items()) if started else None
    finally:
        if started:
            subprocess.run([control], input=b"quit\n", env=full, capture_output=True, timeout=30)
        shutil.rmtree(root, ignore_errors=True)
