"""Which configurations exist: workload lookup, knob checks against Table 2's grids, and sweep grids.

Shared by the profiler and the workload entrypoints, so a typo or an off-grid value gets the same
one-line error wherever it is typed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping

from elastico_core.model.errors import SpecError
from elastico_core.model.job import tp_spec
from elastico_core.model.knobs import TP_KNOB, TP_SIZES, Knobs, KnobSpec, KnobValue, cartesian, value_key
from elastico_core.model.launch import SCALES
from elastico_core.model.workload import JobKind, Workload
from elastico_core.rst.catalog import PAPER_WORKLOADS

TRAIN_WORKLOADS: tuple[str, ...] = tuple(w.name for w in PAPER_WORKLOADS.values() if w.kind is JobKind.TRAIN)
INFER_WORKLOADS: tuple[str, ...] = tuple(w.name for w in PAPER_WORKLOADS.values() if w.kind is JobKind.INFER)


def find_workload(name: str | None, kind: JobKind | None = None) -> Workload:
    """The catalog workload called ``name``; a SpecError listing the known ones otherwise."""
    if not name:
        raise SpecError("no workload given (--workload or ELASTICO_WORKLOAD)", field="workload")
    wl = PAPER_WORKLOADS.get(name.strip().lower())
    names = [w.name for w in PAPER_WORKLOADS.values() if kind is None or w.kind is kind]
    if wl is None or (kind is not None and wl.kind is not kind):
        what = f"{kind.value} workload" if kind else "workload"
        raise SpecError(f"unknown {what} {name!r} (known: {', '.join(names)})", field="workload")
    return wl


def resolve_knobs(workload: Workload, given: Knobs | Mapping[str, KnobValue]) -> Knobs:
    """``given`` completed with the workload's defaults; unknown knobs and off-grid values are errors."""
    raw = given.as_dict() if isinstance(given, Knobs) else dict(given)
    where = f"workload {workload.name!r}"
    specs = {k.name: k for k in workload.knobs}
    if workload.kind is JobKind.INFER:  # a multi-GPU inference job's extra knob (1 is the grid's implicit value)
        specs[TP_KNOB] = tp_spec(max(TP_SIZES))
    names = list(specs)
    merged = workload.defaults.as_dict()
    for name, value in raw.items():
        if name not in names:
            raise SpecError(f"unknown knob {name!r} (knobs: {', '.join(names)})", where=where, field="knobs")
        if name == TP_KNOB and value == 1:
            continue  # the same configuration as no tensor parallelism: keep the profile key of Table 2
        spec = specs[name]
        hit = {value_key(v): v for v in spec.values}.get(value_key(value))
        if hit is None:
            raise SpecError(
                f"value {value!r} is outside the grid {list(spec.values)}", where=where, field=f"knobs.{name}"
            )
        merged[name] = hit
    return Knobs.of(merged)


def check_scale(text: str) -> str:
    scale = text.strip().lower()
    if scale not in SCALES:
        raise SpecError(f"unknown scale {text!r} (scales: {', '.join(SCALES)})", field="scale")
    return scale


def restrict(workload: Workload, grid: Mapping[str, object] | None) -> tuple[KnobSpec, ...]:
    """The workload's knob grid, narrowed per knob by ``grid`` (values must lie in the catalog grid)."""
    if not grid:
        return workload.knobs
    names = [k.name for k in workload.knobs]
    unknown = [k for k in grid if k not in names]
    if unknown:
        raise SpecError(
            f"unknown knob {unknown[0]!r} (knobs: {', '.join(names)})",
            where=f"workload {workload.name!r}",
            field="grid",
        )
    out = []
    for spec in workload.knobs:
        if spec.name not in grid:
            out.append(spec)
            continue
        raw = grid[spec.name]
        values = tuple(raw) if isinstance(raw, (list, tuple)) else (raw,)
        out.append(spec.restricted(values, where=f"workload {workload.name!r}"))  # type: ignore[arg-type]
    return tuple(out)


def sweep_configs(
    workload: Workload, grid: Mapping[str, object] | None = None, max_configs: int = 0, seed: int = 0
) -> list[Knobs]:
    """The (narrowed) Cartesian grid, or a seeded sample of ``max_configs`` of it in grid order."""
    configs = list(cartesian(restrict(workload, grid)))
    if max_configs and len(configs) > max_configs:
        keep = sorted(random.Random(seed).sample(range(len(configs)), max_configs))
        configs = [configs[i] for i in keep]
    return configs


def parse_grid(text: str | None) -> dict[str, object] | None:
    if not text:
        return None
    try:
        grid = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"not valid JSON: {exc.msg}", field="grid") from None
    if not isinstance(grid, dict):
        raise SpecError("must be a JSON object of knob -> list of values", field="grid")
    return grid
