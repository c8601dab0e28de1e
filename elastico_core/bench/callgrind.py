"""Instruction counts instead of times: switch valgrind's callgrind counting on around the calls a
benchmark measures (``bench planner --callgrind``, ``bench replay --callgrind``). The switch is
asynchronous: what is counted around it moves with the machine's load, so compare counts taken side by
side in one batch."""

from __future__ import annotations

import os
import shutil
import subprocess

from elastico_core.model.errors import SpecError


def callgrind_counting(on: bool) -> None:
    """Switch callgrind's instruction counting on or off for this process (the timed calls alone)."""
    tool = shutil.which("callgrind_control")
    if tool is None:
        raise SpecError("--callgrind needs valgrind's callgrind_control on PATH (and the command run under callgrind)", field="callgrind")
    done = subprocess.run([tool, "-i", "on" if on else "off", str(os.getpid())], capture_output=True, text=True)
    if done.returncode or "not detected" in done.stdout + done.stderr:  # (it exits 0 when it finds no such process)
        raise SpecError("this process does not run under callgrind (valgrind --tool=callgrind --instr-atstart=no elastico ...)",
                        field="callgrind")
