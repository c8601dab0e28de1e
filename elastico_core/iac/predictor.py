"""The slowdown-predictor interface the planner calls, and the two simple predictors.

The learned predictors (MLP, LightGBM, linear) implement the same Protocol.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from elastico_core.iac.batch import PairBatch


@runtime_checkable
class SlowdownPredictor(Protocol):
    """Predict S_hat(a|b) = T_a(solo) / T_a(with b) for every row of a batch.

    Called by the planner once per ESP<->IAC round with every co-located pair in both directions.
    Must return an array of len(batch), every value >= 1.0 and finite; must not keep per-call state.
    """

    @property
    def name(self) -> str: ...

    def predict(self, batch: PairBatch) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class NoInterference:
    """Co-location costs nothing: S_hat = 1 for every pair (the planner then packs on capacity alone)."""

    name: str = "none"

    def predict(self, batch: PairBatch) -> np.ndarray:
        return np.ones(len(batch), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class TableLookup:
    """Slowdowns looked up by workload pair, optionally refined by the two configurations.

    ``table`` maps ``(workload_a, workload_b)`` to S(a|b); ``by_config`` maps
    ``(workload_a, knobs_a_json, workload_b, knobs_b_json)`` to S(a|b) and wins where present.
    Unknown pairs get ``default``.
    """

    table: Mapping[tuple[str, str], float] = field(default_factory=dict)
    by_config: Mapping[tuple[str, str, str, str], float] = field(default_factory=dict)
    default: float = 1.0
    name: str = "table"

    def __post_init__(self) -> None:
        entries: list[tuple[object, float]] = [*self.table.items(), *self.by_config.items()]
        for key, value in entries:
            if not value >= 1.0 or not np.isfinite(value):
                raise ValueError(f"slowdown for {key} must be a finite value >= 1, got {value!r}")

    def predict(self, batch: PairBatch) -> np.ndarray:
        out = np.full(len(batch), self.default, dtype=np.float64)
        wa, wb = batch.a.workload, batch.b.workload
        ka, kb = batch.a.knobs_key, batch.b.knobs_key
        for i in range(len(batch)):
            hit = self.by_config.get((wa[i], ka[i], wb[i], kb[i]))
            if hit is None:
                hit = self.table.get((wa[i], wb[i]))
            if hit is not None:
                out[i] = hit
        return out

    @classmethod
    def from_decays(
        cls, decays: Mapping[tuple[str, str], tuple[float, float]], default: float = 1.0, name: str = "table"
    ) -> TableLookup:
        """Build from Table-6 style decays: (a, b) -> (decay_a, decay_b), decay = 1 / slowdown."""
        table: dict[tuple[str, str], float] = {}
        for (a, b), (da, db) in decays.items():
            table[(a, b)] = 1.0 / da
            table[(b, a)] = 1.0 / db
        return cls(table=table, default=default, name=name)


def knob_key(mapping: Mapping[str, object]) -> str:
    return json.dumps(dict(mapping), sort_keys=True, separators=(",", ":"))
