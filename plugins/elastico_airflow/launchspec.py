"""One launch, two launchers: the env and args of an admitted plan, identical for a pod and a local process.

``launch_spec`` is the only place a plan becomes a process description. The Kubernetes launcher turns
it into a container (``podspec``); the local launcher into ``python -m <entrypoint> <args>`` with exactly
this environment. The only values that differ are the three run paths (checkpoint folder, progress
file, control file), which point into the pod's run volume or the local run folder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from elastico_core.model.launch import (
    ENV_CHECKPOINT_DIR,
    ENV_CONTROL_FILE,
    ENV_PROGRESS_FILE,
    ENV_STATE_URL,
)

ENTRY_MODULES = {
    "train": "elastico_core.workloads.train",
    "infer": "elastico_core.workloads.infer",
    "sleep": "elastico_core.workloads.sleep",  # the load test's workload: the contract and nothing heavy
}
# flags a DAG may pass to the entrypoint; the knobs, paths and engine limits come from the plan
ENTRY_FLAGS = {
    "train": {"--steps": True, "--max-seconds": True, "--seed": True},
    "infer": {
        "--input": True,
        "--output": True,
        "--max-tokens": True,
        "--temperature": True,
        "--stop": True,
        "--stop-at-newline": False,
        "--seed": True,
        "--flush-rows": True,
        "--device": True,
    },
    "sleep": {"--seconds": True, "--steps": True},
}
POD_RUN_ROOT = PurePosixPath("/elastico/run")


class EntryArgsError(ValueError):
    """The entrypoint arguments of a task name a flag the plan owns, or are malformed."""


@dataclass(frozen=True, slots=True)
class RunPaths:
    """Where one job checkpoints, reports progress and receives switch requests (stable across relaunches)."""

    checkpoint_dir: str
    progress_file: str
    control_file: str

    def env(self) -> dict[str, str]:
        return {
            ENV_CHECKPOINT_DIR: self.checkpoint_dir,
            ENV_PROGRESS_FILE: self.progress_file,
            ENV_CONTROL_FILE: self.control_file,
        }


def local_run_dir(workdir: Path, job_id: str) -> Path:
    return workdir / job_id


def local_paths(workdir: Path, job_id: str) -> RunPaths:
    root = local_run_dir(workdir, job_id)
    return RunPaths(str(root / "checkpoint"), str(root / "progress.jsonl"), str(root / "control.json"))


def pod_paths(job_id: str) -> RunPaths:
    root = POD_RUN_ROOT / job_id
    return RunPaths(str(root / "checkpoint"), str(root / "progress.jsonl"), str(root / "control.json"))


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """``python -m module *args`` with ``env``: the process of plan ``token``."""

    job_id: str
    token: str
    module: str
    env: tuple[tuple[str, str], ...]
    args: tuple[str, ...]
    paths: RunPaths

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def argv(self, python: str) -> list[str]:
        return [python, "-m", self.module, *self.args]


def check_entry_args(kind: str, args: Sequence[str]) -> tuple[str, ...]:
    """Entry arguments after the allow-list: ``--flag value`` / ``--flag=value`` pairs of ``ENTRY_FLAGS``."""
    if kind not in ENTRY_FLAGS:
        raise EntryArgsError(f"unknown job kind {kind!r}")
    allowed = ENTRY_FLAGS[kind]
    out: list[str] = []
    items = [str(a) for a in args]
    i = 0
    while i < len(items):
        item = items[i]
        flag, eq, _ = item.partition("=")
        if flag not in allowed:
            raise EntryArgsError(
                f"entry argument {flag!r} is not allowed for {kind} jobs (allowed: {', '.join(sorted(allowed))}); "
                "knobs and engine limits come from the admitted plan"
            )
        if allowed[flag] and not eq:
            if i + 1 >= len(items):
                raise EntryArgsError(f"entry argument {flag!r} needs a value")
            out.extend((item, items[i + 1]))
            i += 2
            continue
        if not allowed[flag] and eq:
            raise EntryArgsError(f"entry argument {flag!r} takes no value")
        out.append(item)
        i += 1
    return tuple(out)


def launch_spec(
    job_id: str,
    kind: str,
    token: str,
    plan_env: Mapping[str, str],
    plan_args: Sequence[str],
    paths: RunPaths,
    *,
    entry_args: Sequence[str] = (),
    workload_env: Mapping[str, str] | None = None,
    user_env: Mapping[str, str] | None = None,
    state_url: str | None = None,
) -> LaunchSpec:
    """The process of one plan: contract env (knobs, budgets, MPS limits), run paths, platform workload env,
    the DAG's allow-listed env; the DAG's entry args then the plan's engine args.

    :param state_url: passed as ``ELASTICO_STATE_URL`` only when given (the caller leaves out URLs with a
        password: a pod gets those from a Secret, a local process does not need it).
    """
    if kind not in ENTRY_MODULES:
        raise EntryArgsError(f"unknown job kind {kind!r}")
    env: dict[str, str] = dict(plan_env)
    env.update(paths.env())
    if state_url:
        env[ENV_STATE_URL] = state_url
    for key, value in (workload_env or {}).items():
        env.setdefault(key, value)
    for key, value in (user_env or {}).items():
        env.setdefault(key, value)  # allow-listed names never collide with the contract; never overwrite it
    args = (*check_entry_args(kind, entry_args), *plan_args)
    return LaunchSpec(job_id, token, ENTRY_MODULES[kind], tuple(sorted(env.items())), tuple(args), paths)
