"""Run the ``elastico`` CLI in-process and capture what it printed (shared by the CLI tests)."""

from __future__ import annotations

import pytest

from elastico_core.cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of one command; output printed before the call is discarded."""
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
