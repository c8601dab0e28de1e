"""Job specs: what a DAG author declares instead of a fixed GPU request."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from elastico_core.model.errors import SpecError
from elastico_core.model.knobs import TP_KNOB, TP_SIZES, ChangeKind, Knobs, KnobSpec, KnobValue, space_size
from elastico_core.model.workload import JobKind, Workload

JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,252}$")
DP_KNOB = "dp"
GANG_KNOBS = (DP_KNOB, TP_KNOB)  # the knobs that say on how many GPUs a configuration runs


def gang_size(knobs: Knobs) -> int:
    """GPUs one configuration occupies: its data-parallel (training) or tensor-parallel (inference) degree.

    Every GPU of the gang holds the configuration's per-GPU resources and may hold one partner; a
    tensor-parallel gang must sit on one node (its all-reduces run every layer)."""
    for name in GANG_KNOBS:
        value = knobs.get(name)
        if value is not None:
            return int(value)
    return 1


def tp_spec(max_gpus: int) -> KnobSpec:
    """vLLM's tensor-parallel degree for an inference job of ``max_gpus`` GPUs: 1, 2, 4, 8 up to it.

    Not part of Table 2's grid: a 1-GPU job keeps exactly the paper's knobs (and profile keys)."""
    values = tuple(v for v in TP_SIZES if v <= max_gpus)
    return KnobSpec(TP_KNOB, values, ChangeKind.ENGINE_RESTART, "vLLM tensor-parallel degree (GPUs, one node)")


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job: a workload, the part of its knob grid it allows, and what must hold (Eq. 4).

    ``floor`` is L_j in the workload's unit (samples/s or tokens/s) summed over all GPUs of the job;
    ``weight`` is w_j of Eq. 1; ``work`` is the amount to process, in the same unit times seconds.
    """

    id: str
    workload: Workload
    knob_space: tuple[KnobSpec, ...] = ()
    floor: float = 0.0
    weight: float = 1.0
    work: float = math.inf
    max_gpus: int = 1
    submit_time_s: float = 0.0
    user: str = ""
    queue: str = "default"  # a label people filter by (``jobs list --queue``), as Kueue's queues
    priority: int = 0
    labels: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        where = f"job {self.id!r}"
        if not isinstance(self.id, str) or not JOB_ID.match(self.id):
            raise SpecError("ids are 1-253 letters, digits, '.', '_' or '-'", where=where, field="id")
        for name in ("floor", "weight", "work", "submit_time_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise SpecError(f"must be a number, got {value!r}", where=where, field=name)
            if value < 0:
                raise SpecError(f"must be >= 0, got {value!r}", where=where, field=name)
        if self.weight <= 0:
            raise SpecError(f"must be > 0, got {self.weight!r}", where=where, field="weight")
        if self.work <= 0:
            raise SpecError(f"must be > 0, got {self.work!r}", where=where, field="work")
        if math.isinf(self.floor):
            raise SpecError("must be finite", where=where, field="floor")
        if isinstance(self.max_gpus, bool) or not isinstance(self.max_gpus, int) or self.max_gpus < 1:
            raise SpecError(f"must be an integer >= 1, got {self.max_gpus!r}", where=where, field="gpus")
        if not self.knob_space:
            object.__setattr__(self, "knob_space", default_space(self.workload, self.max_gpus, where=where))
        if space_size(self.knob_space) == 0:
            raise SpecError("empty knob space", where=where, field="knobs")

    @property
    def kind(self) -> JobKind:
        return self.workload.kind

    @property
    def default_knobs(self) -> Knobs:
        """The workload's default, clipped into this job's space (largest allowed value)."""
        chosen: dict[str, KnobValue] = {}
        for spec in self.knob_space:
            want = self.workload.defaults.get(spec.name)
            if spec.name in GANG_KNOBS:
                chosen[spec.name] = max(v for v in spec.values if isinstance(v, int))
            elif want in spec.values:
                assert want is not None
                chosen[spec.name] = want
            else:
                chosen[spec.name] = spec.values[-1]
        return Knobs.of(chosen)


def default_space(workload: Workload, max_gpus: int, *, where: str | None = None) -> tuple[KnobSpec, ...]:
    """The workload's whole grid, with the data-parallel degree capped at the job's GPU request; an
    inference job of more than one GPU also gets the tensor-parallel degree (up to its ``gpus``)."""
    out = []
    for spec in workload.knobs:
        if spec.name == DP_KNOB:
            allowed = tuple(v for v in spec.values if isinstance(v, int) and v <= max_gpus)
            if not allowed:
                raise SpecError(f"no data-parallel degree <= {max_gpus}", where=where, field="gpus")
            spec = spec.restricted(allowed, where=where)
        out.append(spec)
    if workload.kind is JobKind.INFER and max_gpus > 1 and all(s.name != TP_KNOB for s in out):
        out.append(tp_spec(max_gpus))
    return tuple(out)


def check_tp(values: Sequence[KnobValue], max_gpus: int, *, where: str | None = None) -> None:
    """A tensor-parallel degree is a power of two (1-8) and at most the job's ``gpus``."""
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v not in TP_SIZES:
            raise SpecError(f"{v!r} is not a power of two in {list(TP_SIZES)}", where=where, field=f"knobs.{TP_KNOB}")
        if v > max_gpus:
            raise SpecError(f"{v} exceeds the job's gpus ({max_gpus})", where=where, field=f"knobs.{TP_KNOB}")


def narrow_space(
    workload: Workload,
    requested: Mapping[str, Sequence[KnobValue] | KnobValue],
    max_gpus: int,
    *,
    where: str | None = None,
) -> tuple[KnobSpec, ...]:
    """A job's knob space: the workload's grid narrowed to what the author allows."""
    if workload.kind is JobKind.INFER and TP_KNOB in requested:
        raw_tp = requested[TP_KNOB]
        check_tp(list(raw_tp) if isinstance(raw_tp, (list, tuple)) else [raw_tp], max_gpus, where=where)  # type: ignore[list-item]
    base = {s.name: s for s in default_space(workload, max_gpus, where=where)}
    for name in requested:
        if name not in base:
            raise SpecError(
                f"unknown knob {name!r} for workload {workload.name!r} (knobs: {sorted(base)})",
                where=where,
                field="knobs",
            )
    out = []
    for name, spec in base.items():
        if name in requested:
            raw = requested[name]
            values = tuple(raw) if isinstance(raw, (list, tuple)) else (raw,)
            spec = spec.restricted(values, where=where)  # type: ignore[arg-type]
        out.append(spec)
    return tuple(out)
