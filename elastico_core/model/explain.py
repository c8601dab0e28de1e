"""Why a job waits, in a platform engineer's terms: what it needs, how much is free where, what would admit it.

Pure text from the planner's typed values (``QueueCode``, ``Shortfall``), shared by ``elastico plan``,
``elastico jobs`` and the status page so the three say the same thing. Units everywhere: GiB, cores,
the workload's throughput unit; never an internal score without saying what it is.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from elastico_core.model.plan import Binding, QueueCode, Shortfall

MIB_PER_GIB = 1024.0

# what each code means, said plainly, for a job whose planner gave no typed shortfall
_CODE_TEXT = {
    QueueCode.NO_FEASIBLE_CONFIG: "no configuration it allows fits this cluster",
    QueueCode.FLOOR_UNREACHABLE: "no configuration it allows reaches its throughput floor",
    QueueCode.NO_CAPACITY: "waits for room: nothing free fits its smallest configuration beside what runs now",
    QueueCode.PRICED_OUT: "waits: this epoch's market gave what it needs to other jobs",
    QueueCode.INTERFERENCE: "waits: sharing any GPU with what runs now would slow it or its partner too much",
    QueueCode.PREEMPTED: "was running; its GPUs went to other work and it waits to be placed again",
    QueueCode.SET_ASIDE: "set aside: planning it failed unexpectedly (not its fault); it is retried every epoch",
    QueueCode.QUOTA: "waits for its queue's quota",
    QueueCode.RECLAIMED: "was running on quota its queue had borrowed; the quota went back to its owner",
    QueueCode.OUTBID: "was running; shorter jobs that waited bid more for its GPUs, so it was checkpointed and waits",
}
# codes whose reason the planner words in full (Kueue's precision): it beats a sentence from the shortfall
_OWN_WORDS = (QueueCode.QUOTA, QueueCode.RECLAIMED, QueueCode.OUTBID)

# planner wording that only its authors can act on: replaced by the code's plain sentence
_JARGON = ("w*T/T_max", "score units", "rent at current prices")

# what a user can change, per code, when the planner gave no shortfall to put a number on
_ADMIT_HINT = {
    QueueCode.PRICED_OUT: "it is placed when room frees up or its weight outbids the jobs that hold it",
    QueueCode.NO_CAPACITY: "a smaller configuration (micro-batch, max_num_seqs, max_model_len) would fit sooner",
    QueueCode.INTERFERENCE: "it starts when a GPU frees up without a conflicting partner",
    QueueCode.FLOOR_UNREACHABLE: "lower its floor or allow faster configurations",
    QueueCode.NO_FEASIBLE_CONFIG: "allow smaller configurations or add a larger GPU",
    QueueCode.QUOTA: "a smaller configuration, or quota its cohort does not use, would admit it sooner",
    QueueCode.RECLAIMED: "it resumes from its checkpoint when its queue has quota again",
    QueueCode.OUTBID: "it resumes from its checkpoint when room frees up (a priority above the waiting jobs' protects a job)",
}


def gib(mib: float) -> str:
    """``4.0 GiB`` for a MiB figure."""
    return f"{mib / MIB_PER_GIB:.1f} GiB"


def unit_of_kind(kind: str) -> str:
    """The throughput unit of a job kind (``train`` → samples/s, ``infer`` → tokens/s)."""
    return "samples/s" if kind == "train" else "tokens/s"


def rate(value: float | None, unit: str) -> str:
    """A throughput with its unit, ``160 samples/s``; ``–`` when unknown."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:,.3g} {unit}".strip() if abs(value) < 1000 else f"{value:,.0f} {unit}".strip()


def amount(resource: Binding, value: float, unit: str = "") -> str:
    """A quantity of ``resource`` in the unit a user reads."""
    if resource in (Binding.GPU_MEMORY, Binding.HOST_MEMORY):
        return gib(value)
    if resource is Binding.SM:
        return f"{100 * value:.0f}% of a GPU's SMs"
    if resource is Binding.CPU:
        return f"{value:g} CPU cores"
    if resource is Binding.GPU_SLOT:
        return f"{value:g} GPUs"
    if resource is Binding.FLOOR:
        return rate(value, unit)
    if resource is Binding.INTERFERENCE:
        return f"{value:.2f}x slowdown"
    if resource is Binding.QUOTA:
        return f"{value:.2f} GPUs of quota"
    if resource is Binding.QUOTA_MEMORY:
        return f"{value:.1f} GiB of GPU-memory quota"
    return f"{value:.3g} score units"


_WHERE = {
    Binding.GPU_MEMORY: "GPU memory on one GPU",
    Binding.SM: "",
    Binding.GPU_SLOT: "that can take another job",
    Binding.CPU: "on a node with a free GPU",
    Binding.HOST_MEMORY: "host memory on a node with a free GPU",
}


def _names(holders: tuple[str, ...], n: int = 3) -> str:
    shown = ", ".join(holders[:n])
    return shown + (f" and {len(holders) - n} more" if len(holders) > n else "")


def describe_shortfall(s: Shortfall, unit: str = "") -> str:
    """``needs 4.0 GiB host memory on a node with a free GPU; most free: 1.5 GiB on gpu-node``."""
    need, free = amount(s.resource, s.need, unit), amount(s.resource, s.free, unit)
    at = f" on {s.where}" if s.where else ""
    if s.resource is Binding.FLOOR:
        return f"its floor is {need}; its best configuration reaches {free}{at}"
    if s.resource is Binding.INTERFERENCE:
        if s.holders:
            return (f"sharing {s.where} with {_names(s.holders)} predicts a {s.free:.2f}x slowdown (the worse side "
                    f"of the pair); its tolerance is {s.need:.2f}x")
        return f"its best pairing{at} predicts a {s.free:.2f}x slowdown; its tolerance is {s.need:.2f}x"
    if s.resource is Binding.PRICE:
        return f"its value ({s.free:.3g}) is below the rent of what it needs ({s.need:.3g}) at current prices{at}"
    where = _WHERE.get(s.resource, "")
    lead = f"needs {need} {where}".rstrip()
    held = f" (held by {_names(s.holders)})" if s.holders else ""
    return f"{lead}; most free: {free}{at}{held}"


def describe_capacity(s: Shortfall, unit: str = "") -> str:
    """A job that never fits, against the largest figure the cluster has: ``free`` is a whole GPU's or
    node's capacity there, not what is free now."""
    need, has = amount(s.resource, s.need, unit), amount(s.resource, s.free, unit)
    node = f"the largest node ({s.where})" if s.where else "the largest node"
    if s.resource is Binding.GPU_MEMORY:
        return f"its smallest configuration needs {need} of GPU memory on one GPU; a GPU here has {has} for jobs"
    if s.resource is Binding.SM:
        return f"its smallest configuration needs {need}; a GPU allows {has}"
    if s.resource is Binding.HOST_MEMORY:
        return f"its smallest configuration needs {need} of host memory on one node; {node} has {has}"
    if s.resource is Binding.CPU:
        return f"its smallest configuration needs {need} on one node; {node} has {has}"
    if s.resource is Binding.GPU_SLOT:
        one = f" on one node; {node} can hold {has}" if s.where else f"; the cluster can hold {has}"
        return f"its smallest gang needs {need}{one}"
    return describe_shortfall(s, unit)


def admit_hint(code: QueueCode | None, s: Shortfall | None, unit: str = "") -> str:
    """What would admit a queued job, with the number: the GiB it lacks and where, the floor that would fit,
    the configuration or node size that would hold it, the partner it waits out, the weight that outbids."""
    if s is None or code is QueueCode.OUTBID:  # an outbid job waits for room, not for a larger bid of its own
        return _ADMIT_HINT.get(code, "") if code is not None else ""
    never = code is QueueCode.NO_FEASIBLE_CONFIG
    lack = max(0.0, s.need - s.free)
    where = f" on {s.where}" if s.where else ""
    r = s.resource
    if r is Binding.FLOOR:
        if s.free <= 0:
            return "no configuration it allows has a profile on this cluster's GPUs: allow other configurations"
        return f"a floor of at most {rate(s.free, unit)} would let it run"
    if r is Binding.INTERFERENCE:
        if s.holders and s.where:
            return f"it starts when {_names(s.holders)} leave {s.where}, or another GPU frees up"
        return "it starts when a GPU frees up without a partner it would slow beyond its tolerance"
    if r is Binding.PRICE:
        if s.free <= 0:
            return "its configurations are worth nothing at their throughput: allow faster configurations"
        return f"a weight {s.need / s.free:.2g}x its current one would outbid the rent"
    if never:
        if r is Binding.GPU_MEMORY:
            return f"a configuration needing at most {gib(s.free)} of GPU memory per GPU would fit"
        if r is Binding.SM:
            return f"a configuration using at most {amount(r, s.free)} would fit"
        if r in (Binding.HOST_MEMORY, Binding.CPU):
            return f"a node with {amount(r, s.need)} would hold it (it lacks {amount(r, lack)})"
        return f"at most {s.free:g} GPUs (gpus: {s.free:g}) would fit"
    return f"it is placed once another {amount(r, lack)} is free{where}"


def strip_code(reason: str, code: str | None) -> str:
    """The planner's reason without a repeated code prefix (``priced-out: priced out: …`` → ``priced out: …``)."""
    text = reason.strip()
    if code:
        while text.startswith(f"{code}: "):
            text = text[len(code) + 2 :]
    return text


def _code(code: str | QueueCode | None) -> QueueCode | None:
    if code is None or isinstance(code, QueueCode):
        return code
    try:
        return QueueCode(code)
    except ValueError:
        return None


def shortfall_of(raw: Shortfall | Mapping[str, Any] | None) -> Shortfall | None:
    """A ``Shortfall`` from itself or its ``as_dict`` form (the state's JSON column); ``None`` if unreadable."""
    if raw is None or isinstance(raw, Shortfall):
        return raw
    try:
        holders = raw.get("holders") or ()
        return Shortfall(Binding(str(raw["resource"])), float(raw["need"]), float(raw["free"]), raw.get("where"),
                         tuple(str(h) for h in holders) if isinstance(holders, (list, tuple)) else ())
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


@dataclass(frozen=True, slots=True)
class WaitReason:
    """A queued job's explanation: the headline, what would admit it, its place in the queue."""

    headline: str
    admit_hint: str
    position: int | None = None
    behind: str | None = None

    def text(self) -> str:
        parts = [self.headline]
        if self.behind:
            parts.append(f"next after {self.behind}")
        if self.admit_hint:
            parts.append(self.admit_hint)
        return "; ".join(parts)


def explain_wait(
    code: str | QueueCode | None,
    reason: str = "",
    shortfall: Shortfall | Mapping[str, Any] | None = None,
    *,
    unit: str = "",
    position: int | None = None,
    behind: str | None = None,
) -> WaitReason:
    """Why a job waits: from the typed shortfall when the planner gave one, else the code in plain words."""
    qc = _code(code)
    s = shortfall_of(shortfall)
    said = strip_code(reason, qc.value if qc is not None else None)
    if said and qc in _OWN_WORDS:
        headline = said
    elif s is not None:
        headline = describe_capacity(s, unit) if qc is QueueCode.NO_FEASIBLE_CONFIG else describe_shortfall(s, unit)
    elif qc is None:
        headline = "waits for the controller's next epoch (it has not planned this job yet)"
    elif said and not any(word in said for word in _JARGON):
        headline = said  # the planner's own specific words (figures and units) beat a generic sentence
    else:
        headline = _CODE_TEXT[qc]
    return WaitReason(headline, admit_hint(qc, s, unit), position, behind)


def queue_positions(jobs: Iterable[tuple[str, int, dt.datetime]]) -> dict[str, int]:
    """1-based queue positions of pending jobs in the controller's order (priority desc, registration, id)."""
    ordered = sorted(jobs, key=lambda j: (-j[1], j[2], j[0]))
    return {job_id: i + 1 for i, (job_id, _, _) in enumerate(ordered)}
