"""Frozen, typed values every layer shares. No I/O here."""

from elastico_core.model.cluster import Cluster, Gpu, Node
from elastico_core.model.errors import ElasticoError, SpecError
from elastico_core.model.hardware import KNOWN_GPUS, GpuModel, HardwareSignature, gpu_model
from elastico_core.model.job import DP_KNOB, JobSpec, narrow_space
from elastico_core.model.knobs import ChangeKind, Knobs, KnobSpec, KnobValue, cartesian, change_kind
from elastico_core.model.plan import (
    Action,
    ActionKind,
    Penalty,
    Placement,
    Plan,
    Prices,
    QueueCode,
    Queued,
    RoundLog,
    Violation,
)
from elastico_core.model.profile import Counters, Profile, Source
from elastico_core.model.resources import ResourceVector
from elastico_core.model.state import Assignment
from elastico_core.model.workload import InferShape, JobKind, TrainShape, Workload

__all__ = [
    "DP_KNOB",
    "KNOWN_GPUS",
    "Action",
    "ActionKind",
    "Assignment",
    "ChangeKind",
    "Cluster",
    "Counters",
    "ElasticoError",
    "Gpu",
    "GpuModel",
    "HardwareSignature",
    "InferShape",
    "JobKind",
    "JobSpec",
    "KnobSpec",
    "KnobValue",
    "Knobs",
    "Node",
    "Penalty",
    "Placement",
    "Plan",
    "Prices",
    "Profile",
    "QueueCode",
    "Queued",
    "ResourceVector",
    "RoundLog",
    "Source",
    "SpecError",
    "TrainShape",
    "Violation",
    "Workload",
    "cartesian",
    "change_kind",
    "gpu_model",
    "narrow_space",
]
