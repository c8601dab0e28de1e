"""Queues in the simulator: what each queue holds over time, and the figures of a shared cluster.

``QueueMeter`` follows every job's contribution to its queue while the simulator runs (what placed jobs
hold, what pending jobs ask) and records it at every change. ``queue_metrics`` turns that into:

* **guarantee-violation time**: GPU-hours during which a queue with pending demand held less than
  min(nominal, demand) *past the reclaim deadline*: from the moment one of its pending jobs fits in its
  nominal quota beside what it holds (it is owed), the deficit min(nominal, held + pending) - held counts
  once the queue has been owed for longer than the deadline, until it is not owed any more;
* **Jain's index of normalised shares**: each queue's share is the GPU-hours it held over the GPU-hours
  of min(nominal, demand) it was entitled to (1: it got its guarantee, more: it borrowed); Jain's index
  over the queues that had demand, (sum x)^2 / (n sum x^2);
* per queue: GPU-hours held, entitled, borrowed (held above nominal), and the violation.

What a queue holds is charged as the policy's own admission charges it: by ``model.queues.charge`` (a
share of each GPU) for policies that share GPUs, by whole GPUs for a policy that never does (Volcano-
like). A pending job asks for its default configuration (what it requested).

``philly_queues`` is the rule that turns the Philly trace's virtual clusters into queues: nominal GPUs
proportional to each one's GPU-hours over the whole trace (largest remainders, summing to the cluster), as
a platform team sets quotas from long-run use; in any one day some teams are idle and lend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from elastico_core.model.queues import Amount, QueueSet, QueueSpec, charge
from elastico_core.sim.trace import Trace, supported_dp

TOL = 1e-6


@dataclass(frozen=True, slots=True)
class Charging:
    """How a policy's admission counts a placed job against its queue."""

    whole_gpus: bool = False  # a policy that never shares a GPU holds whole ones
    sm_capacity: float = 1.0  # inf: time-sliced packing (SM share is no limit)

    def of(self, dp: int, sm: float, mem_mib: float, usable_mib: float, max_jobs: int) -> float:
        if self.whole_gpus:
            return float(dp)
        return charge(dp, sm, mem_mib, usable_mib, self.sm_capacity, max_jobs)


@dataclass(frozen=True, slots=True)
class QueueTrace:
    """Per queue over time: held and pending GPUs' worth (``[i]`` holds on ``[t[i], t[i+1])``)."""

    names: tuple[str, ...]
    nominal: np.ndarray  # (Q,) GPUs
    t: np.ndarray  # (N,)
    held: np.ndarray  # (N, Q)
    pending: np.ndarray  # (N, Q): what pending jobs ask
    owed: np.ndarray  # (N, Q) bool: a pending job fits in the nominal quota beside what the queue holds
    deadline_s: float


class QueueMeter:
    """Follows each job's contribution (held if placed, asked if pending) and samples the queues."""

    def __init__(self, queues: QueueSet, model: str, deadline_s: float) -> None:
        self.names = queues.names
        self.index = {n: i for i, n in enumerate(self.names)}
        self.nominal = np.array([q.nominal_of(model).gpus for q in queues.queues])
        self.deadline_s = deadline_s
        n = len(self.names)
        self.held = np.zeros(n)
        self.asked = np.zeros(n)
        self.waiting: list[dict[str, float]] = [{} for _ in range(n)]
        self.jobs: dict[str, tuple[int, float, float]] = {}  # job -> (queue, held, asked)
        self.rows: list[tuple[float, np.ndarray, np.ndarray, np.ndarray]] = []

    def set(self, job_id: str, queue: str, held: float, asked: float) -> None:
        """The job now holds ``held`` and asks ``asked`` (0 and 0 once it finished)."""
        q = self.index.get(queue, -1)
        if q < 0:
            return
        _, h0, a0 = self.jobs.get(job_id, (q, 0.0, 0.0))
        self.held[q] += held - h0
        self.asked[q] += asked - a0
        if asked > 0:
            self.waiting[q][job_id] = asked
        else:
            self.waiting[q].pop(job_id, None)
        if held == 0 and asked == 0:
            self.jobs.pop(job_id, None)
        else:
            self.jobs[job_id] = (q, held, asked)

    def sample(self, t: float) -> None:
        held = np.maximum(self.held, 0.0)
        smallest = np.array([min(w.values()) if w else math.inf for w in self.waiting])
        owed = held + smallest <= self.nominal + TOL
        row = (t, held.copy(), np.maximum(self.asked, 0.0), owed)
        if self.rows and self.rows[-1][0] == t:
            self.rows[-1] = row
        else:
            self.rows.append(row)

    def trace(self) -> QueueTrace:
        n = len(self.names)
        if not self.rows:
            return QueueTrace(self.names, self.nominal, np.zeros(0), np.zeros((0, n)), np.zeros((0, n)), np.zeros((0, n), dtype=bool),
                              self.deadline_s)
        t, held, asked, owed = zip(*self.rows, strict=True)
        return QueueTrace(self.names, self.nominal, np.array(t), np.array(held), np.array(asked), np.array(owed), self.deadline_s)


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """One queue's totals over the window (GPU-hours)."""

    name: str
    nominal_gpus: float
    held_gpu_h: float
    entitled_gpu_h: float  # of min(nominal, demand)
    borrowed_gpu_h: float  # held above nominal
    violation_gpu_h: float
    share: float  # held / entitled (nan: no demand)


@dataclass(frozen=True, slots=True)
class QueueMetrics:
    violation_gpu_h: float
    jain: float
    queues: tuple[QueueFigures, ...] = field(default=())

    def as_json(self) -> dict[str, object]:
        return {
            "guarantee_violation_gpu_h": round(self.violation_gpu_h, 4),
            "jain_index": round(self.jain, 4),
            "queues": {q.name: {"nominal_gpus": q.nominal_gpus, "held_gpu_h": round(q.held_gpu_h, 3),
                                "entitled_gpu_h": round(q.entitled_gpu_h, 3), "borrowed_gpu_h": round(q.borrowed_gpu_h, 3),
                                "violation_gpu_h": round(q.violation_gpu_h, 4),
                                "share": None if math.isnan(q.share) else round(q.share, 4)} for q in self.queues},
        }


def queue_metrics(tr: QueueTrace, start: float, end: float) -> QueueMetrics:
    """The module doc's figures over [start, end]."""
    n = len(tr.names)
    if not len(tr.t) or end <= start:
        return QueueMetrics(0.0, math.nan, ())
    edges = np.append(tr.t, max(end, float(tr.t[-1])))
    lo, hi = np.clip(edges[:-1], start, end), np.clip(edges[1:], start, end)
    dt = (hi - lo)[:, None]  # (N, 1)
    demand = tr.held + tr.pending
    entitled = np.minimum(tr.nominal[None, :], demand)
    deficit = np.where(tr.owed, np.maximum(entitled - tr.held, 0.0), 0.0)
    # the part of each interval past the deadline of the owed spell it belongs to
    since = np.full(n, math.nan)
    late = np.zeros_like(deficit)
    for i in range(len(tr.t)):
        owed = tr.owed[i]
        since = np.where(owed, np.where(np.isnan(since), tr.t[i], since), math.nan)
        due = since + tr.deadline_s
        late[i] = np.where(owed, np.clip(hi[i] - np.maximum(lo[i], due), 0.0, None), 0.0)
    violation = (deficit * late).sum(axis=0) / 3600.0
    held_h = (tr.held * dt).sum(axis=0) / 3600.0
    entitled_h = (entitled * dt).sum(axis=0) / 3600.0
    borrowed_h = (np.maximum(tr.held - tr.nominal[None, :], 0.0) * dt).sum(axis=0) / 3600.0
    share = np.where(entitled_h > TOL, held_h / np.where(entitled_h > TOL, entitled_h, 1.0), math.nan)
    x = share[np.isfinite(share)]
    jain = float(x.sum() ** 2 / (len(x) * (x ** 2).sum())) if len(x) and (x ** 2).sum() > 0 else math.nan
    figures = tuple(
        QueueFigures(tr.names[q], float(tr.nominal[q]), float(held_h[q]), float(entitled_h[q]), float(borrowed_h[q]),
                     float(violation[q]), float(share[q]))
        for q in range(n)
    )
    return QueueMetrics(float(violation.sum()), jain, figures)


def philly_queues(hours: Mapping[str, float], gpus: int, model: str, usable_gib: float, *, cohort: str = "philly",
                  reclaim_epochs: int = 3) -> QueueSet:
    """Philly's virtual clusters as queues (module doc): nominal GPUs proportional to each one's GPU-hours
    (``hours``, from ``hours_by_queue`` over the whole trace), by largest remainders so they add up to
    ``gpus`` (each with its GPUs' whole memory); equal weights, one cohort, no borrowing or lending limits."""
    names = sorted(hours)
    total = sum(hours.values())
    exact = [gpus * hours[n] / total if total > 0 else gpus / len(names) for n in names]
    quota = [math.floor(x) for x in exact]
    for i in sorted(range(len(names)), key=lambda i: (-(exact[i] - quota[i]), names[i]))[: gpus - sum(quota)]:
        quota[i] += 1
    return QueueSet(tuple(QueueSpec(n, ((model, Amount(float(q), q * usable_gib)),), cohort=cohort)
                          for n, q in zip(names, quota, strict=True)), reclaim_epochs)


def hours_by_queue(trace: Trace) -> dict[str, float]:
    """GPU-hours each queue's jobs asked for in the trace (the rule's input, for the report)."""
    out: dict[str, float] = {}
    for j in trace.jobs:
        out[j.queue] = out.get(j.queue, 0.0) + j.duration_s * supported_dp(j.num_gpus) / 3600.0
    return out


def demand_over_time(trace: Trace, step_s: float = 600.0) -> tuple[np.ndarray, np.ndarray]:
    """GPUs the trace's jobs would hold if each ran at once for its duration (submit .. submit + duration)."""
    if not trace.jobs:
        return np.zeros(0), np.zeros(0)
    end = max(j.submit_time_s + j.duration_s for j in trace.jobs)
    grid = np.arange(0.0, end + step_s, step_s)
    level = np.zeros(len(grid))
    for j in trace.jobs:
        a, b = np.searchsorted(grid, [j.submit_time_s, j.submit_time_s + j.duration_s])
        level[a:b] += supported_dp(j.num_gpus)
    return grid, level
