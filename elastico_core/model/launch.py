"""The launch contract: how a placement reaches the process that runs the job.

One contract for the Kubernetes pod and the local launcher, read by the workload entrypoints:

* ``ELASTICO_JOB_ID``, ``ELASTICO_WORKLOAD``: who and what;
* ``ELASTICO_KNOBS``: the configuration as canonical JSON; and one ``ELASTICO_KNOB_<NAME>`` per knob
  (upper-case name; booleans as ``true``/``false``);
* ``ELASTICO_GPU_MEM_BUDGET_MIB``: the memory budget M_j of §4.2;
* training: ``ELASTICO_MEMORY_FRACTION`` (-> ``torch.cuda.set_per_process_memory_fraction``) and
  ``PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:<M_j>``; ``ELASTICO_DP`` is the data-parallel degree;
* vLLM inference: engine arguments ``--max-num-seqs``, ``--max-model-len``,
  ``--gpu-memory-utilization``, ``--enable-prefix-caching`` / ``--no-enable-prefix-caching`` and, for a
  job that spans GPUs, ``--tensor-parallel-size``;
* co-located under MPS: ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<M_j>M`` and
  ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``;
* set by the launcher, not the planner: ``ELASTICO_CHECKPOINT_DIR``, ``ELASTICO_PROGRESS_FILE``,
  ``ELASTICO_CONTROL_FILE`` (switch requests) and ``ELASTICO_STATE_URL``; optionally ``ELASTICO_SCALE``
  (model size preset: ``tiny``/``small``/``full``), ``ELASTICO_TORCH_THREADS`` (intra-op threads) and
  ``ELASTICO_MODEL`` (the inference model: a local folder, never fetched from a hub).

Progress (``ELASTICO_PROGRESS_FILE``) is JSON lines appended by the job (rank 0), one object per event:
``{"event": "start"|"step"|"checkpointed"|"stopped"|"done"|"error"|"oom", "step", "samples", ...}``; a ``step``
event carries ``n`` (samples or tokens of that iteration), ``dt_s``, ``rate`` (n / dt_s), ``mem_mib``.
A job that runs out of memory (the device allocator under its cap) writes a last ``oom`` event with
``budget_mib``, ``memory_fraction`` and ``peak_mib`` and exits with ``EXIT_OOM``, so a launcher knows for
certain, without reading the error text, that it ran out of memory rather than failed.
A switch request is the control file appearing with ``{"action": "checkpoint"}`` (save, exit 0) or
``{"action": "stop"}`` (exit 0 without saving); SIGTERM acts as ``checkpoint``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from elastico_core.model.knobs import Knobs, KnobValue

ENV_JOB_ID = "ELASTICO_JOB_ID"
ENV_WORKLOAD = "ELASTICO_WORKLOAD"
ENV_KNOBS = "ELASTICO_KNOBS"
ENV_KNOB_PREFIX = "ELASTICO_KNOB_"
ENV_MEM_BUDGET = "ELASTICO_GPU_MEM_BUDGET_MIB"
ENV_MEM_FRACTION = "ELASTICO_MEMORY_FRACTION"
ENV_DP = "ELASTICO_DP"
ENV_CHECKPOINT_DIR = "ELASTICO_CHECKPOINT_DIR"
ENV_PROGRESS_FILE = "ELASTICO_PROGRESS_FILE"
ENV_CONTROL_FILE = "ELASTICO_CONTROL_FILE"
ENV_STATE_URL = "ELASTICO_STATE_URL"
ENV_TORCH_ALLOC = "PYTORCH_CUDA_ALLOC_CONF"
ENV_MPS_MEM = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
ENV_MPS_THREADS = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
ENV_SCALE = "ELASTICO_SCALE"
ENV_THREADS = "ELASTICO_TORCH_THREADS"
ENV_MODEL = "ELASTICO_MODEL"
ENV_PAUSE_BEFORE_DEVICE = "ELASTICO_PAUSE_BEFORE_DEVICE"  # profiling: stop (SIGSTOP) before touching the device

EXIT_OOM = 75  # sysexits' EX_TEMPFAIL: the job can run again, in less memory

CONTROL_CHECKPOINT = "checkpoint"  # save model/optimizer/step, then exit 0 (relaunch resumes)
CONTROL_STOP = "stop"  # exit 0 at the next iteration boundary without saving
PROGRESS_EVENTS: tuple[str, ...] = ("start", "step", "checkpointed", "stopped", "done", "error", "oom")
SCALES: tuple[str, ...] = ("tiny", "small", "full")  # ELASTICO_SCALE values
DEFAULT_CPU_MODEL = ".elastico/models/tiny-llama"  # vLLM's model on a CPU when ELASTICO_MODEL is unset


def knob_env_name(name: str) -> str:
    return ENV_KNOB_PREFIX + name.upper()


def knob_env_value(value: KnobValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_knob_env(env: Mapping[str, str]) -> Knobs:
    """The configuration a launched process was given (``ELASTICO_KNOBS`` wins over the per-knob vars)."""
    raw = env.get(ENV_KNOBS)
    if raw:
        return Knobs.from_json(raw)
    out: dict[str, KnobValue] = {}
    for key, text in env.items():
        if key.startswith(ENV_KNOB_PREFIX):
            out[key[len(ENV_KNOB_PREFIX) :].lower()] = _parse_scalar(text)
    return Knobs.of(out)


def _parse_scalar(text: str) -> KnobValue:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


@dataclass(frozen=True, slots=True)
class LaunchSettings:
    """Environment and arguments for one job's process (pod container or local process)."""

    env: tuple[tuple[str, str], ...]
    args: tuple[str, ...] = ()

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def to_json(self) -> str:
        return json.dumps({"env": dict(self.env), "args": list(self.args)}, sort_keys=True)


@dataclass(frozen=True, slots=True)
class StepEvent:
    """One ``step`` line of the progress file: ``n`` samples (or generated tokens) in ``dt_s`` seconds."""

    step: int
    samples: float  # cumulative, including steps before a resume
    n: float
    dt_s: float
    t: float  # wall clock (time.time()) at the end of the iteration
    mem_mib: float = float("nan")  # peak device memory so far
    cpu_s: float = float("nan")  # CPU time the process spent in the iteration

    @property
    def rate(self) -> float:
        return self.n / self.dt_s if self.dt_s > 0 else 0.0


def parse_progress_line(line: str) -> dict[str, object] | None:
    """One progress event, or None for a torn or foreign line (readers skip it)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) and obj.get("event") in PROGRESS_EVENTS else None


def step_event(obj: Mapping[str, object]) -> StepEvent:
    def num(key: str) -> float:
        value = obj.get(key)
        return float("nan") if value is None else float(value)  # type: ignore[arg-type]

    return StepEvent(int(num("step")), num("samples"), num("n"), num("dt_s"), num("t"), num("mem_mib"), num("cpu_s"))


def control_json(action: str = CONTROL_CHECKPOINT, reason: str = "") -> str:
    """The body of a switch request written to ``ELASTICO_CONTROL_FILE``."""
    return json.dumps({"action": action, "reason": reason})


def control_action(text: str) -> str:
    """The action a control file asks for; empty or unparsable means ``checkpoint`` (the safe choice)."""
    try:
        raw = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return CONTROL_CHECKPOINT
    action = raw.get("action") if isinstance(raw, dict) else None
    return CONTROL_STOP if action == CONTROL_STOP else CONTROL_CHECKPOINT
