"""Entrypoint guard: a validation error is one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable

from elastico_core.model.errors import ElasticoError

EXIT_USAGE = 2


def guarded(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    def run(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except ElasticoError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return run
