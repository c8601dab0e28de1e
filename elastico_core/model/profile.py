"""Profiles (R, T) of one configuration on one kind of hardware, and their provenance."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from elastico_core.model.hardware import HardwareSignature
from elastico_core.model.knobs import Knobs
from elastico_core.model.resources import ResourceVector

NAN = math.nan


class Source(StrEnum):
    MEASURED = "measured"
    ESTIMATED = "estimated"
    INTERPOLATED = "interpolated"  # nearest-neighbour fallback (§3.1.2), never stored


@dataclass(frozen=True, slots=True)
class Counters:
    """Steady-state hardware counters of a configuration running alone (§3.3.1); NaN when unknown."""

    sm_active: float = NAN
    sm_occupancy: float = NAN
    dram_active: float = NAN
    fb_used_mb: float = NAN
    tensor_active: float = NAN


@dataclass(frozen=True, slots=True)
class Profile:
    """RST(c) for one job configuration: resources per GPU, isolated throughput, provenance.

    ``throughput`` is for the whole job (all its data-parallel GPUs), in ``unit``.
    """

    workload: str
    knobs: Knobs
    signature: HardwareSignature
    resources: ResourceVector
    throughput: float
    unit: str
    source: Source
    counters: Counters = Counters()
    mlflow_run_id: str = ""
    measured_at: str = ""
    provenance: str = ""  # how a stored estimate was made (e.g. calibrated from which measured rows)
