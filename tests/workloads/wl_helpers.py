"""Helpers of the workload tests: a clean launch environment and running an entrypoint."""

from __future__ import annotations

import os
import subprocess
import sys


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment without launch-contract variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTICO_")}
    env.update({"ELASTICO_TORCH_THREADS": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""})
    env.update(extra)
    return env


def run_module(
    module: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], env=env or clean_env(), capture_output=True, text=True, timeout=timeout
    )
