"""Model size presets: the same architectures at test, CPU-demo and paper size."""

from __future__ import annotations

from enum import StrEnum

from elastico_core.model.errors import SpecError


class Scale(StrEnum):
    """``tiny`` runs an iteration in milliseconds on one CPU thread (tests); ``full`` is the paper's model."""

    TINY = "tiny"
    SMALL = "small"
    FULL = "full"


def parse_scale(text: str) -> Scale:
    try:
        return Scale(text.strip().lower())
    except ValueError:
        raise SpecError(
            f"unknown scale {text!r} (scales: {', '.join(s.value for s in Scale)})", field="scale"
        ) from None
