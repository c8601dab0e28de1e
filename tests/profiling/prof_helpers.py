"""Helpers of the profiler tests: short windows, and the ``elastico`` CLI run in-process."""

from __future__ import annotations

import json

import pytest

from tests.cli_runner import run_cli as cli

# short windows for tests: 0.3 s (or 5 iterations) of warm-up, 1 s measured, one thread, one retry
FAST = ["--warmup-s", "0.3", "--warmup-iters", "5", "--measure-s", "1.0", "--threads", "1", "--retries", "1"]


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> object:
    code, out, err = cli(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)
