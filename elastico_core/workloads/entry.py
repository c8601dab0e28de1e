"""Entrypoint guard: a validation error is one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Protocol

from elastico_core.model.errors import ElasticoError

EXIT_USAGE = 2


class Main(Protocol):
    def __call__(self, argv: list[str] | None = None) -> int: ...


def guarded(main: Callable[[list[str] | None], int]) -> Main:
    """Wrap an entrypoint's ``main`` so ElasticoError becomes ``error: ...`` on stderr and exit code 2."""

    def run(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except ElasticoError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return run
