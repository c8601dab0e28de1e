"""Load-test entrypoint: ``python -m elastico_core.workloads.sleep --seconds 60``.

A job that does nothing but keep the launch contract, so a load test measures the orchestration and not
the model: it writes ``start``, a ``step`` every ``--seconds / --steps`` seconds and ``done`` to the
progress file, honours switch requests (the control file or SIGTERM: it saves its step and exits 0 with
``checkpointed``; ``stop`` exits with ``stopped``) and resumes from its checkpoint when relaunched. It
imports only the standard library and the contract (no torch, no numpy): start-up is a fraction of a
second, so a thousand of them fit on a small machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from elastico_core.model.launch import ENV_CHECKPOINT_DIR, ENV_CONTROL_FILE, ENV_KNOBS, ENV_PROGRESS_FILE
from elastico_core.workloads.control import CHECKPOINT, NONE, STOP, StopRequests
from elastico_core.workloads.entry import guarded
from elastico_core.workloads.progress import ProgressWriter

CHECKPOINT_FILE = "sleep.json"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m elastico_core.workloads.sleep", description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=30.0, help="run this long in total (across relaunches)")
    p.add_argument("--steps", type=int, default=10, help="progress steps over that time")
    return p


def _resume_step(folder: Path | None) -> int:
    if folder is None:
        return 0
    try:
        return int(json.loads((folder / CHECKPOINT_FILE).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _save(folder: Path | None, step: int) -> None:
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (CHECKPOINT_FILE + ".tmp")
    tmp.write_text(json.dumps({"step": step}))
    os.replace(tmp, folder / CHECKPOINT_FILE)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.seconds < 0 or args.steps < 1:
        parser().error("--seconds must be >= 0 and --steps >= 1")
    env = os.environ
    ckpt = Path(env[ENV_CHECKPOINT_DIR]) if env.get(ENV_CHECKPOINT_DIR) else None
    control = Path(env[ENV_CONTROL_FILE]) if env.get(ENV_CONTROL_FILE) else None
    progress = ProgressWriter(Path(env[ENV_PROGRESS_FILE]) if env.get(ENV_PROGRESS_FILE) else None)
    requests = StopRequests(control)
    requests.install()
    knobs = json.loads(env.get(ENV_KNOBS) or "{}")
    step = _resume_step(ckpt)
    progress.emit("start", device="cpu", knobs=knobs, step=step, resumed=step > 0, pid=os.getpid(), workload="sleep")
    dt_s = args.seconds / args.steps
    try:
        while step < args.steps:
            t0 = time.monotonic()
            while time.monotonic() - t0 < dt_s:
                asked = requests.poll()
                if asked is not NONE:
                    if asked == STOP:
                        progress.emit("stopped", step=step, samples=float(step))
                        return 0
                    if asked == CHECKPOINT:
                        _save(ckpt, step)
                        progress.emit("checkpointed", step=step, samples=float(step))
                        return 0
                time.sleep(min(0.2, max(0.0, dt_s - (time.monotonic() - t0))))
            step += 1
            took = time.monotonic() - t0
            progress.emit(
                "step",
                step=step,
                samples=float(step),
                n=1,
                dt_s=round(took, 6),
                rate=round(1 / took, 4) if took else None,
            )
        progress.emit("done", step=step, samples=float(step))
        return 0
    finally:
        progress.close()


if __name__ == "__main__":
    sys.exit(guarded(main)())
