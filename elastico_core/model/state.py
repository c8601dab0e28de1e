"""What runs where right now: the planner's view of the current cluster state."""

from __future__ import annotations

from dataclasses import dataclass

from elastico_core.model.knobs import Knobs


@dataclass(frozen=True, slots=True)
class Assignment:
    """A running job's current configuration and GPUs (the state ``--running`` describes)."""

    job_id: str
    knobs: Knobs
    gpus: tuple[str, ...]
