"""Helpers of the profiler tests: short windows, and the ``elastico`` CLI run in-process."""

from __future__ import annotations

import json

import pytest

from elastico_core.cli import main

# short windows for tests: 0.3 s (or 5 iterations) of warm-up, 1 s measured, one thread, one retry
FAST = ["--warmup-s", "0.3", "--warmup-iters", "5", "--measure-s", "1.0", "--threads", "1", "--retries", "1"]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> object:
    code, out, err = cli(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)
