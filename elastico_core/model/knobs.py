"""Knobs: the system-level settings that reshape a job without changing what it computes (§3.1.1)."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

from elastico_core.model.errors import SpecError

KnobValue = int | float | bool | str

TP_KNOB = "tensor_parallel_size"  # vLLM's tensor-parallel degree: the GPUs one inference job spans
TP_SIZES = (1, 2, 4, 8)  # powers of two that divide the attention heads of Table 2's models
# what a knobs document may hold (a JSON object of scalars): anything larger or deeper is not a configuration
MAX_KNOBS_JSON_CHARS = 4096
MAX_KNOB_INT = 2**53  # the largest integer a float (JSON's number, parquet's double) holds exactly
MAX_KNOB_TEXT = 64


class ChangeKind(Enum):
    """What it takes to change a knob on a running job (§5.7), cheapest first."""

    FLAG_TOGGLE = 0  # side-channel flag, sub-millisecond
    ENGINE_RESTART = 1  # drain and relaunch the serving engine, 5-15 s
    CHECKPOINT_RESUME = 2  # torch.save, relaunch the pod, resume, 15-45 s

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


SHORT_NAMES = {
    "micro_batch": "mb",
    "checkpointing": "ck",
    "amp": "amp",
    "dp": "dp",
    "max_num_seqs": "seqs",
    "max_model_len": "len",
    "prefix_caching": "pc",
    "gpu_memory_utilization": "mu",
    "tensor_parallel_size": "tp",
}
_KNOB_WORDS = {"checkpointing": "activation checkpointing", "amp": "mixed precision (AMP)", "dp": "data-parallel GPUs",
               "prefix_caching": "prefix caching", "gpu_memory_utilization": "vLLM gpu_memory_utilization",
               "tensor_parallel_size": "vLLM tensor-parallel GPUs"}


def knob_legend(names: Iterable[str]) -> str:
    """``mb = micro_batch, ck = activation checkpointing, …`` for the knobs a table shows (``Knobs.short``)."""
    return ", ".join(f"{SHORT_NAMES.get(n, n)} = {_KNOB_WORDS.get(n, n)}" for n in sorted(set(names)))


@dataclass(frozen=True, slots=True)
class Knobs:
    """An immutable, hashable assignment of knob name -> value, kept in name order."""

    items: tuple[tuple[str, KnobValue], ...]

    @classmethod
    def of(cls, mapping: Mapping[str, KnobValue]) -> Knobs:
        return cls(tuple(sorted((str(k), v) for k, v in mapping.items())))

    def get(self, name: str, default: KnobValue | None = None) -> KnobValue | None:
        for key, value in self.items:
            if key == name:
                return value
        return default

    def __getitem__(self, name: str) -> KnobValue:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: object) -> bool:
        return any(key == name for key, _ in self.items)

    def as_dict(self) -> dict[str, KnobValue]:
        return dict(self.items)

    def with_(self, **changes: KnobValue) -> Knobs:
        merged = self.as_dict()
        merged.update(changes)
        return Knobs.of(merged)

    def to_json(self) -> str:
        """Canonical JSON: the profile store's key and what the operator injects."""
        return _canonical_json(self.items)

    @classmethod
    def from_json(cls, text: str) -> Knobs:
        """Parse a stored knobs document: a JSON object of scalar values (see ``check_knob_value``).

        The size is checked before parsing, so a hostile document (deeply nested brackets, megabytes of
        digits) is one ``SpecError``, never a ``RecursionError`` or a slow parse.
        """
        if len(text) > MAX_KNOBS_JSON_CHARS:
            raise SpecError(f"knobs document of {len(text):,} characters (at most {MAX_KNOBS_JSON_CHARS:,})")
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"knobs are not valid JSON: {exc.msg}") from None
        except (RecursionError, ValueError) as exc:  # nesting too deep; an integer of too many digits
            raise SpecError(f"knobs are not valid JSON: {type(exc).__name__}") from None
        if not isinstance(raw, dict):
            raise SpecError(f"knobs must be a JSON object, got {type(raw).__name__}")
        for name, value in raw.items():
            check_knob_value(name, value)
        return cls.of(raw)

    def short(self) -> str:
        """Human-readable form for tables: ``mb=128 ck amp`` (flags shown when on, dp and tp only when > 1)."""
        out = []
        for key, value in self.items:
            name = SHORT_NAMES.get(key, key)
            if isinstance(value, bool):
                if value:
                    out.append(name)
            elif key in ("dp", TP_KNOB) and value == 1:
                continue
            else:
                out.append(f"{name}={value}")
        return " ".join(out) if out else "-"


@dataclass(frozen=True, slots=True)
class KnobSpec:
    """One knob of a workload: its grid of allowed values and what changing it costs."""

    name: str
    values: tuple[KnobValue, ...]
    change: ChangeKind = ChangeKind.CHECKPOINT_RESUME
    help: str = ""

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise SpecError(f"knob names are identifiers, got {self.name!r}", field="knobs")
        if not self.values:
            raise SpecError("empty knob grid", field=f"knobs.{self.name}")
        if len({value_key(v) for v in self.values}) != len(self.values):
            raise SpecError(f"duplicate values {list(self.values)}", field=f"knobs.{self.name}")
        for v in self.values:
            if isinstance(v, float) and not math.isfinite(v):
                raise SpecError(f"non-finite value {v!r}", field=f"knobs.{self.name}")

    def restricted(self, allowed: tuple[KnobValue, ...], *, where: str | None = None) -> KnobSpec:
        """The same knob narrowed to ``allowed``, which must lie inside the grid."""
        grid = {value_key(v) for v in self.values}
        outside = [v for v in allowed if value_key(v) not in grid]
        typed = [v for v in outside if isinstance(v, str) and value_key(_number(v)) in grid]
        if typed:  # "64" for 64: the value is right, its type is not (YAML quotes, JSON strings)
            raise SpecError(
                f"{typed[0]!r} is a string; write the number {typed[0]} without quotes (grid {list(self.values)})",
                where=where,
                field=f"knobs.{self.name}",
            )
        if outside:
            raise SpecError(
                f"values {outside} are outside the grid {list(self.values)}",
                where=where,
                field=f"knobs.{self.name}",
            )
        if not allowed:
            raise SpecError("empty knob space", where=where, field=f"knobs.{self.name}")
        wanted = {value_key(v) for v in allowed}
        ordered = tuple(v for v in self.values if value_key(v) in wanted)
        return KnobSpec(self.name, ordered, self.change, self.help)


def check_knob_value(name: str, value: object) -> None:
    """A knob value is a bool, an integer a double holds exactly, a finite float or a short string.

    :raises SpecError: naming the knob, for anything else (null, a list or object, NaN, 2**70, 10 kB of text).
    """
    where = f"knobs.{str(name)[:MAX_KNOB_TEXT]}"
    if not str(name) or not str(name).replace("_", "").isalnum() or len(str(name)) > MAX_KNOB_TEXT:
        raise SpecError(f"knob names are identifiers of at most {MAX_KNOB_TEXT} characters", field=where)
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if abs(value) > MAX_KNOB_INT:
            raise SpecError(f"integer beyond +-2**53 ({len(str(abs(value)))} digits)", field=where)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(f"non-finite value {value!r}", field=where)
        return
    if isinstance(value, str):
        if len(value) > MAX_KNOB_TEXT or "\x00" in value:
            raise SpecError(f"text values are at most {MAX_KNOB_TEXT} characters without NUL", field=where)
        return
    raise SpecError(f"want a number, a boolean or text, got {type(value).__name__}", field=where)


def _number(text: str) -> KnobValue:
    """A string's number or flag, if it spells one (for the error of a quoted value); else the string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def value_key(value: KnobValue) -> tuple[str, KnobValue]:
    """Compare knob values by kind as well as value: ``True`` is not the batch size 1."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("num", float(value))
    return ("str", value)


def cartesian(specs: tuple[KnobSpec, ...]) -> Iterator[Knobs]:
    """Every configuration of a knob space (the Cartesian product of Table 2)."""
    names = [s.name for s in specs]
    for combo in itertools.product(*(s.values for s in specs)):
        yield Knobs(tuple(sorted(zip(names, combo, strict=True))))


def space_size(specs: tuple[KnobSpec, ...]) -> int:
    return math.prod(len(s.values) for s in specs)


def change_kind(specs: tuple[KnobSpec, ...], old: Knobs, new: Knobs) -> ChangeKind | None:
    """The costliest kind of change between two configurations, None when they are equal."""
    worst: ChangeKind | None = None
    by_name = {s.name: s for s in specs}
    for name in {k for k, _ in old.items} | {k for k, _ in new.items}:
        if old.get(name) != new.get(name):
            kind = by_name[name].change if name in by_name else ChangeKind.CHECKPOINT_RESUME
            if worst is None or kind.value > worst.value:
                worst = kind
    return worst


@lru_cache(maxsize=1 << 16)
def _canonical_json(items: tuple[tuple[str, KnobValue], ...]) -> str:
    # cached: the planner keys every co-located pair's features by it, epoch after epoch
    return json.dumps(dict(items), sort_keys=True, separators=(",", ":"))
