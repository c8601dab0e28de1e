"""Reading the launch contract (``elastico_core.model.launch``) into one frozen value per entrypoint.

Precedence: command-line arguments, then ``ELASTICO_KNOBS``, then the per-knob ``ELASTICO_KNOB_<NAME>``
variables, then the workload's defaults. Every knob is checked against the workload's grid (Table 2), so
a typo or an off-grid value fails at launch with a message that names it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from elastico_core.model.errors import SpecError
from elastico_core.model.knobs import Knobs, KnobValue, value_key
from elastico_core.model.launch import (
    ENV_CHECKPOINT_DIR,
    ENV_CONTROL_FILE,
    ENV_DP,
    ENV_KNOB_PREFIX,
    ENV_KNOBS,
    ENV_MEM_BUDGET,
    ENV_MEM_FRACTION,
    ENV_PROGRESS_FILE,
    ENV_SCALE,
    ENV_THREADS,
    ENV_WORKLOAD,
    parse_knob_env,
)
from elastico_core.model.workload import JobKind, Workload
from elastico_core.rst.catalog import PAPER_WORKLOADS
from elastico_core.workloads.scale import Scale, parse_scale

TRAIN_WORKLOADS: tuple[str, ...] = tuple(w.name for w in PAPER_WORKLOADS.values() if w.kind is JobKind.TRAIN)
INFER_WORKLOADS: tuple[str, ...] = tuple(w.name for w in PAPER_WORKLOADS.values() if w.kind is JobKind.INFER)


def find_workload(name: str | None, kind: JobKind | None = None) -> Workload:
    """The catalog workload called ``name``; a SpecError listing the known ones otherwise."""
    if not name:
        raise SpecError(f"no workload given (--workload or {ENV_WORKLOAD})", field="workload")
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
    names = [k.name for k in workload.knobs]
    merged = workload.defaults.as_dict()
    for name, value in raw.items():
        if name not in names:
            raise SpecError(f"unknown knob {name!r} (knobs: {', '.join(names)})", where=where, field="knobs")
        spec = workload.knob(name)
        grid = {value_key(v): v for v in spec.values}
        hit = grid.get(value_key(value))
        if hit is None:
            raise SpecError(f"value {value!r} is outside the grid {list(spec.values)}", where=where, field=f"knobs.{name}")
        merged[name] = hit
    return Knobs.of(merged)


def knobs_from_env(env: Mapping[str, str]) -> Knobs:
    if env.get(ENV_KNOBS) or any(k.startswith(ENV_KNOB_PREFIX) for k in env):
        return parse_knob_env(env)
    return Knobs.of({})


def _float(env: Mapping[str, str], name: str) -> float | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise SpecError(f"must be a number, got {text!r}", field=name) from None


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = _float(env, name)
    if value is None:
        return None
    if value != int(value) or value < 1:
        raise SpecError(f"must be an integer >= 1, got {env[name]!r}", field=name)
    return int(value)


def _path(arg: str | None, env: Mapping[str, str], name: str) -> Path | None:
    text = arg if arg is not None else env.get(name, "")
    return Path(text) if text else None


@dataclass(frozen=True, slots=True)
class RunPaths:
    """Where a job checkpoints, reports progress and looks for switch requests (all optional)."""

    checkpoint_dir: Path | None = None
    progress_file: Path | None = None
    control_file: Path | None = None


@dataclass(frozen=True, slots=True)
class TrainLaunch:
    """Everything a training process takes from its launch: workload, knobs, budgets, paths."""

    workload: Workload
    knobs: Knobs
    scale: Scale
    threads: int | None
    memory_fraction: float | None  # torch.cuda.set_per_process_memory_fraction
    mem_budget_mib: int | None
    paths: RunPaths

    @property
    def micro_batch(self) -> int:
        return int(self.knobs["micro_batch"])

    @property
    def checkpointing(self) -> bool:
        return bool(self.knobs["checkpointing"])

    @property
    def amp(self) -> bool:
        return bool(self.knobs["amp"])

    @property
    def dp(self) -> int:
        return int(self.knobs["dp"])


def default_scale(env: Mapping[str, str], cuda: bool) -> Scale:
    text = env.get(ENV_SCALE, "")
    if text:
        return parse_scale(text)
    return Scale.FULL if cuda else Scale.TINY


def train_launch(
    env: Mapping[str, str],
    *,
    workload: str | None = None,
    knobs_json: str | None = None,
    scale: str | None = None,
    threads: int | None = None,
    checkpoint_dir: str | None = None,
    progress_file: str | None = None,
    control_file: str | None = None,
    cuda: bool = False,
) -> TrainLaunch:
    """Merge arguments and environment into a validated ``TrainLaunch``."""
    wl = find_workload(workload or env.get(ENV_WORKLOAD), JobKind.TRAIN)
    given = Knobs.from_json(knobs_json) if knobs_json else knobs_from_env(env)
    knobs = resolve_knobs(wl, given)
    dp_env = _int(env, ENV_DP)
    if dp_env is not None and "dp" in given and int(knobs["dp"]) != dp_env:
        raise SpecError(f"{ENV_DP}={dp_env} disagrees with the knob dp={knobs['dp']}", field="dp")
    if dp_env is not None:
        knobs = resolve_knobs(wl, knobs.with_(dp=dp_env))
    fraction = _float(env, ENV_MEM_FRACTION)
    if fraction is not None and not 0.0 < fraction <= 1.0:
        raise SpecError(f"must lie in (0, 1], got {fraction}", field=ENV_MEM_FRACTION)
    return TrainLaunch(
        workload=wl,
        knobs=knobs,
        scale=parse_scale(scale) if scale else default_scale(env, cuda),
        threads=threads if threads is not None else _int(env, ENV_THREADS),
        memory_fraction=fraction,
        mem_budget_mib=_int(env, ENV_MEM_BUDGET),
        paths=RunPaths(
            checkpoint_dir=_path(checkpoint_dir, env, ENV_CHECKPOINT_DIR),
            progress_file=_path(progress_file, env, ENV_PROGRESS_FILE),
            control_file=_path(control_file, env, ENV_CONTROL_FILE),
        ),
    )


def check_writable_dir(path: Path, what: str) -> None:
    """Create ``path`` and prove a file can be written there, before any work is done."""
    probe = path / f".write-probe-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise SpecError(f"not writable ({type(exc).__name__}: {exc.strerror or exc})", where=f"{what} {str(path)!r}") from None
