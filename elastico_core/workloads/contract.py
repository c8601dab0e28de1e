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
from elastico_core.model.knobs import Knobs
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
from elastico_core.profiling.configs import INFER_WORKLOADS, TRAIN_WORKLOADS, find_workload, resolve_knobs
from elastico_core.workloads.scale import Scale, parse_scale


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
        raise SpecError(
            f"not writable ({type(exc).__name__}: {exc.strerror or exc})", where=f"{what} {str(path)!r}"
        ) from None


__all__ = ["INFER_WORKLOADS", "TRAIN_WORKLOADS", "TrainLaunch", "find_workload", "resolve_knobs", "train_launch"]
