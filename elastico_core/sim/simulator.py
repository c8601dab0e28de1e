"""``simulate``: replay a trace through one policy on a simulated cluster (discrete events, seeded).

**Time.** Arrivals, completions and the end of every change of configuration are events. Between
events each running job progresses at ``T(c) / S`` where T(c) is the isolated throughput of its
configuration (its data-parallel degree included) and S the ground-truth slowdown of its worst GPU:
on each GPU ``1 + sum over running partners of (S(j|k) - 1)``; a synchronous data-parallel job
moves at the pace of its slowest worker. Partners in the middle of a change do not interfere.

**Epochs.** The policy runs at epoch boundaries (``epoch_s``, the controller's ΔT = 5 s), but only
when its input changed: an arrival, a completion, the end of a switch / migration / resume, an
out-of-memory crash. A change at time t is seen at the first boundary >= t, exactly where a
controller ticking every ΔT would see it. A policy that declares itself ``event_driven`` (its
decision is a function of that event-driven state — the job set, their states and placements, its
own carried state — and asking twice gives the same answer) loses nothing when the unchanged ticks
are skipped: Volcano-, Lucid-like and greedy are such policies, and ``every_epoch=True`` (the
reference mode, one call per ΔT) gives identical results for them (a test checks it). The Planner is
not: it warm-starts prices and reserves for the jobs that waited last epoch, so a second call can
admit what the first did not. It is therefore also asked every ``replan_s`` (default ΔT) while jobs
wait — every tick at which the real controller could decide differently, except the ticks at which
nothing waits and nothing changed.

**Changes.** The simulator diffs each decision against the current state (admit, keep, switch,
migrate, preempt) and charges ``CostModel`` for each; the job holds its new GPUs, makes no progress
until the change completes. Decisions are validated against the profiles (``DecisionError`` when a
policy over-commits a GPU's memory or names GPUs it may not use). Then the ground truth's memory
decides: when the real footprints on a GPU exceed the device less M_sys, the job whose change caused
it crashes at the end of its start-up and returns to the queue (``oom_knobs`` tells the policy).

**Queues.** On a cluster with queues a ``QueueMeter`` follows what each queue's jobs hold and ask, charged
as the policy's admission counts them (its ``charging``, ``sim/queues.py``); the result carries it.

**Watching.** An optional ``SimWatcher`` sees what the simulated cluster measures (the running jobs of
every GPU whose occupants or speeds may have changed) and is told before each policy call; the
simulated day that learns its interference model (``sim.learning``) is one. It reads, never writes:
without one, nothing of the above changes.
"""

from __future__ import annotations

import math
import operator
import time
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

import numpy as np

from elastico_core.model.cluster import Cluster
from elastico_core.model.errors import ElasticoError
from elastico_core.model.job import gang_size
from elastico_core.model.knobs import ChangeKind, Knobs, change_kind
from elastico_core.model.profile import Profile
from elastico_core.model.state import Assignment
from elastico_core.model.workload import JobKind, Workload
from elastico_core.rst.store import ProfileStore
from elastico_core.sim.costs import CostModel
from elastico_core.sim.events import Engine, Epoch, Event, JobArrival, JobFinish, TransitionDone
from elastico_core.sim.policy import ClusterSnapshot, Decision, JobStatus, JobView, Policy
from elastico_core.sim.profiles import ProfileBook
from elastico_core.sim.queues import Charging, QueueMeter
from elastico_core.sim.result import JobRecord, Series, SimResult
from elastico_core.sim.trace import SimJob, Trace, build_jobs
from elastico_core.sim.truth import ContentionTruth, GroundTruth

EPS = 1e-9


class DecisionError(ElasticoError):
    """A policy returned a decision the cluster cannot carry out (a policy bug, never a user error)."""


@dataclass(frozen=True, slots=True)
class Running:
    """A job making progress on a GPU, as a watcher sees it."""

    job_id: str
    workload: Workload
    profile: Profile
    speed: float  # its progress rate now: the profile's throughput over the slowdown of its worst GPU
    gpus: int  # GPUs it holds (a multi-GPU job moves at the pace of its slowest worker)


@runtime_checkable
class SimWatcher(Protocol):
    """Sees what the simulation measures; must not change the run (it only reads its arguments)."""

    def gpus_changed(self, t: float, occupants: Mapping[int, tuple[Running, ...]]) -> None:
        """The running jobs of every GPU (by index) whose occupants or their speeds may have changed at ``t``."""
        ...

    def before_policy(self, t: float) -> None:
        """Called at ``t`` before the policy decides (outside the timed decision)."""
        ...


@dataclass(frozen=True, slots=True)
class SimConfig:
    epoch_s: float = 5.0
    replan_s: float = 5.0
    every_epoch: bool = False
    floor_frac: float = 0.5
    duration_estimate_sigma: float = 0.5  # log-normal error of the runtime estimates policies see
    costs: CostModel = field(default_factory=CostModel)
    max_time_s: float = 60 * 86400.0
    record_events: bool = False

    def __post_init__(self) -> None:
        if self.epoch_s <= 0 or self.replan_s < self.epoch_s:
            raise ValueError("need epoch_s > 0 and replan_s >= epoch_s")


class _Status(Enum):
    FUTURE = 0
    PENDING = 1
    RUNNING = 2
    CHANGING = 3
    FINISHED = 4


_JOB_ID = operator.attrgetter("job_id")
_PLACED = (_Status.RUNNING, _Status.CHANGING)  # a tuple: membership by identity, no Enum hashing


class _Job:
    """Mutable per-job state of one run (never leaves this module)."""

    __slots__ = (
        "changing_gpu_s",
        "changing_s",
        "checkpoint_resumes",
        "crash",
        "current",
        "est_duration",
        "finish",
        "first_start",
        "gpus",
        "held_s",
        "knobs",
        "last_t",
        "mem",
        "migrations",
        "oom_knobs",
        "ooms",
        "preemptions",
        "profile",
        "queued_since",
        "sched",
        "sim",
        "speed",
        "status",
        "switches",
        "version",
        "view",
        "work_done",
    )

    def __init__(self, sim: SimJob, est_duration: float) -> None:
        self.sim = sim
        self.status = _Status.FUTURE
        self.knobs: Knobs | None = None
        self.gpus: tuple[int, ...] = ()
        self.profile: Profile | None = None
        self.mem = 0.0
        self.speed = 0.0
        self.work_done = 0.0
        self.last_t = 0.0
        self.version = 0
        self.sched = -1  # version of the scheduled finish event
        self.first_start = math.nan
        self.finish = math.nan
        self.queued_since = sim.spec.submit_time_s
        self.held_s = 0.0
        self.changing_s = 0.0
        self.changing_gpu_s = 0.0
        self.switches = self.migrations = self.preemptions = self.ooms = self.checkpoint_resumes = 0
        self.oom_knobs: tuple[Knobs, ...] = ()
        self.crash = False
        self.est_duration = est_duration
        self.view: JobView | None = None  # cached snapshot view; None when the state changed
        self.current: Assignment | None = None

    @property
    def placed(self) -> bool:
        return self.status in _PLACED


class _Run:
    def __init__(
        self, jobs: Sequence[SimJob], policy: Policy, cluster: Cluster, book: ProfileBook, truth: GroundTruth,
        seed: int, cfg: SimConfig, progress: Callable[[float], None] | None, watcher: SimWatcher | None = None,
    ) -> None:
        self.policy, self.cluster, self.book, self.truth, self.seed, self.cfg = policy, cluster, book, truth, seed, cfg
        self.progress = progress
        self.watcher = watcher
        self.engine = Engine()
        self.gpu_ids = tuple(g.id for g in cluster.gpus)
        self.gpu_index = {g: i for i, g in enumerate(self.gpu_ids)}
        self.usable = cluster.usable_mem_mib(book.gpu)
        self.device_mem = float(book.gpu.memory_mib)
        # the jobs holding each GPU, as tuples (a snapshot hands them out without copying)
        self.on_gpu: list[tuple[str, ...]] = [() for _ in self.gpu_ids]
        self.gpu_sm = [0.0] * len(self.gpu_ids)
        self.gpu_mem = [0.0] * len(self.gpu_ids)
        # GPU -> memory its jobs ask beyond what it has: a job that will crash for it (``_memory_truth``) never
        # gets it, so the memory series counts every GPU at most full
        self.mem_over: dict[int, float] = {}
        self.gpu_est = [0.0] * len(self.gpu_ids)  # profile memory, what policies see
        self.gpu_rate = [0.0] * len(self.gpu_ids)
        self.tot_sm = self.tot_mem = self.tot_rate = 0.0
        self.busy = 0
        self.n_pending = self.n_placed = 0
        self.jobs: dict[str, _Job] = {}
        self.active: dict[str, _Job] = {}  # arrived, not finished, in arrival order
        for sj in jobs:
            rng = np.random.default_rng([seed & 0xFFFFFFFF, zlib.crc32(sj.spec.id.encode()), 7])
            est = sj.trace.duration_s * math.exp(cfg.duration_estimate_sigma * rng.normal())
            self.jobs[sj.spec.id] = _Job(sj, est)
        self.dirty = False
        self.state: object = None
        self.epoch_no = 0
        self.last_call = -math.inf
        self.scheduled_epochs: set[float] = set()
        self.decide_ms: list[float] = []
        self.decide_at: list[float] = []
        self.stale = 0
        self.log: list[tuple[float, str, str]] = []
        self.series: list[tuple[float, float, float, int, float, int, int]] = []
        self.unfinished = len(self.jobs)
        self.arrivals_left = len(self.jobs)
        self.notes: list[str] = []
        self.meter: QueueMeter | None = None
        self.charging = getattr(policy, "charging", Charging())
        if cluster.queues:
            deadline = (cluster.queues.reclaim_epochs + 1) * cfg.epoch_s  # epochs, and the first tick's wait
            self.meter = QueueMeter(cluster.queues, book.gpu.name, deadline)

    def _meter(self, j: _Job) -> None:
        """The job's contribution to its queue (held if placed, its default configuration asked if pending)."""
        if self.meter is None:
            return
        spec = j.sim.spec
        held = asked = 0.0
        mj = self.cluster.max_jobs_per_gpu
        if j.placed and j.profile is not None:
            r = j.profile.resources
            held = self.charging.of(len(j.gpus), r.sm, r.gpu_mem_mib, self.usable, mj)
        elif j.status is _Status.PENDING:
            p = self.book.profile(spec.workload, j.sim.default_knobs)
            if p is not None:
                asked = self.charging.of(j.sim.dp, p.resources.sm, p.resources.gpu_mem_mib, self.usable, mj)
        self.meter.set(spec.id, spec.queue, held, asked)

    # ---- events ------------------------------------------------------------------------------
    def handle(self, ev: Event) -> list[Event]:
        if self.progress is not None:
            self.progress(ev.time)
        match ev:
            case JobArrival():
                return self.on_arrival(ev)
            case JobFinish():
                return self.on_finish(ev)
            case TransitionDone():
                return self.on_transition(ev)
            case Epoch():
                return self.on_epoch(ev)
        raise TypeError(f"unknown event {ev!r}")

    def _record(self, t: float, kind: str, job_id: str) -> None:
        if self.cfg.record_events:
            self.log.append((round(t, 6), kind, job_id))

    def on_arrival(self, ev: JobArrival) -> list[Event]:
        j = self.jobs[ev.job_id]
        j.status = _Status.PENDING
        j.queued_since = ev.time
        j.view = None
        self.active[ev.job_id] = j
        self.n_pending += 1
        self.arrivals_left -= 1
        self._record(ev.time, "arrive", ev.job_id)
        self._meter(j)
        self._sample(ev.time)
        return self._mark_dirty(ev.time)

    def on_finish(self, ev: JobFinish) -> list[Event]:
        j = self.jobs[ev.job_id]
        if j.version != ev.version or j.status is not _Status.RUNNING:
            self.stale += 1
            return []
        t = ev.time
        self._record(t, "finish", ev.job_id)
        touched = set(j.gpus)
        self._integrate_gpus(touched, t)
        j.work_done = j.sim.spec.work
        j.finish = t
        self._unplace(j)
        j.status = _Status.FINISHED
        self.n_placed -= 1
        del self.active[j.sim.spec.id]
        self.unfinished -= 1
        self._meter(j)
        self._refresh(touched, t)
        self._sample(t)
        return self._mark_dirty(t)

    def on_transition(self, ev: TransitionDone) -> list[Event]:
        j = self.jobs[ev.job_id]
        if j.version != ev.version or j.status is not _Status.CHANGING:
            self.stale += 1
            return []
        t = ev.time
        touched = set(j.gpus)
        self._integrate_gpus(touched, t)
        if ev.oom:
            self._record(t, "oom", ev.job_id)
            j.ooms += 1
            assert j.knobs is not None
            if j.knobs not in j.oom_knobs:
                j.oom_knobs = (*j.oom_knobs, j.knobs)
            self._unplace(j)
            j.status = _Status.PENDING
            j.queued_since = t
            j.version += 1
            self.n_placed -= 1
            self.n_pending += 1
        else:
            self._record(t, "ready", ev.job_id)
            j.status = _Status.RUNNING
        j.view = None
        self._meter(j)
        self._refresh(touched, t)
        self._sample(t)
        return self._mark_dirty(t)

    def on_epoch(self, ev: Epoch) -> list[Event]:
        t = ev.time
        self.scheduled_epochs.discard(t)
        out: list[Event] = []
        periodic = not self.policy.event_driven
        due = periodic and self.n_pending > 0 and t - self.last_call >= self.cfg.replan_s - EPS
        if self.dirty or due or self.cfg.every_epoch:
            self.dirty = False
            self.last_call = t
            self._call_policy(t)
        if self.arrivals_left == 0 and self.n_placed == 0 and self.n_pending > 0 and self.last_call == t:
            # an empty cluster, nothing left to arrive, and the policy placed nothing: it never will
            self.notes.append(f"at {t:.0f} s {self.n_pending} jobs can never be placed by this policy: stopped")
            return out
        if self.cfg.every_epoch:
            if self.unfinished > 0:
                out += self._epoch_at(t + self.cfg.epoch_s)
        elif periodic and self.n_pending > 0:
            out += self._epoch_at(self.last_call + self.cfg.replan_s)
        return out

    def _epoch_at(self, t: float) -> list[Event]:
        b = math.ceil(t / self.cfg.epoch_s - 1e-9) * self.cfg.epoch_s
        b = round(b, 6)
        if b in self.scheduled_epochs:
            return []
        self.scheduled_epochs.add(b)
        return [Epoch(b)]

    def _mark_dirty(self, t: float) -> list[Event]:
        self.dirty = True
        return self._epoch_at(t)

    # ---- the policy ----------------------------------------------------------------------------
    def _new_view(self, j: _Job) -> JobView:
        """The job as policies see it, kept on the job until it changes (``view = None``)."""
        spec = j.sim.spec
        status = (
            JobStatus.PENDING if j.status is _Status.PENDING
            else JobStatus.RUNNING if j.status is _Status.RUNNING else JobStatus.CHANGING
        )
        placed = j.placed and j.profile is not None
        j.view = JobView(
            spec=spec,
            status=status,
            current=j.current if j.placed else None,
            default_knobs=j.sim.default_knobs,
            dp=j.sim.dp,
            work_done=j.work_done,
            progress_at_s=j.last_t,
            speed=j.speed if j.status is _Status.RUNNING else 0.0,
            mem_mib=j.profile.resources.gpu_mem_mib if placed and j.profile else 0.0,
            sm=j.profile.resources.sm if placed and j.profile else 0.0,
            first_start_s=None if math.isnan(j.first_start) else j.first_start,
            queued_since_s=j.queued_since,
            estimated_duration_s=j.est_duration,
            oom_knobs=j.oom_knobs,
            restarts=j.ooms + j.preemptions,
        )
        return j.view

    def snapshot(self, t: float) -> ClusterSnapshot:
        views = tuple([j.view if j.view is not None else self._new_view(j) for j in self.active.values()])
        gpu_jobs = tuple(self.on_gpu)
        return ClusterSnapshot(t, self.epoch_no, self.cluster, views, gpu_jobs, self.book, self.state)

    def _call_policy(self, t: float) -> None:
        if self.watcher is not None:
            self.watcher.before_policy(t)
        snap = self.snapshot(t)
        t0 = time.perf_counter()
        decision = self.policy.decide(snap)
        self.decide_ms.append((time.perf_counter() - t0) * 1e3)
        self.decide_at.append(t)
        self.epoch_no += 1
        self.state = decision.state
        self._apply(decision, t)

    # ---- applying a decision -------------------------------------------------------------------
    def _validate(self, decision: Decision) -> tuple[list[tuple[_Job, Assignment, tuple[int, ...], Profile]], list[_Job]]:
        """The decision's changes (assignments that differ from the current state) and preemptions.

        Unchanged assignments were valid when made; changed ones are checked in full, and memory and
        job counts are re-checked on every GPU a change touches, by the profiles the policy sees.
        """
        who = f"policy {self.policy.kind.value}"
        changed: list[tuple[_Job, Assignment, tuple[int, ...], Profile]] = []
        assignments = decision.assignments
        ids = list(map(_JOB_ID, assignments))
        seen = set(ids)
        if len(seen) != len(ids):
            twice = next(jid for jid, n in Counter(ids).items() if n > 1)
            raise DecisionError(f"{who} placed {twice!r} twice")
        jobs = list(map(self.active.get, ids))
        if None in jobs:  # _Job has identity equality: a C-level scan
            raise DecisionError(f"{who} placed {ids[jobs.index(None)]!r}, which is not waiting or running")
        kept = 0  # placed jobs kept as they run
        for a, j in zip(assignments, jobs, strict=True):
            assert j is not None
            cur = j.current
            if cur is not None and (a is cur or (a.gpus == cur.gpus and a.knobs == cur.knobs)) and j.placed:
                kept += 1
                continue
            spec = j.sim.spec
            by_name = {s.name: s for s in spec.knob_space}
            if set(by_name) != {k for k, _ in a.knobs.items} or any(v not in by_name[k].values for k, v in a.knobs.items):
                raise DecisionError(f"{who} gave {a.job_id!r} knobs {a.knobs.short()} outside its space")
            dp = gang_size(a.knobs)
            try:
                gpus = tuple(self.gpu_index[g] for g in a.gpus)
            except KeyError as exc:
                raise DecisionError(f"{who} placed {a.job_id!r} on unknown GPU {exc.args[0]!r}") from None
            if len(gpus) != dp or len(set(gpus)) != dp:
                raise DecisionError(f"{who} placed {a.job_id!r} (dp={dp}) on {len(set(gpus))} distinct GPUs")
            prof = self.book.profile(spec.workload, a.knobs)
            if prof is None:
                raise DecisionError(f"{who} gave {a.job_id!r} a configuration that cannot run: {a.knobs.short()}")
            changed.append((j, a, gpus, prof))
        moving = [j for j, *_ in changed if j.placed]
        # every placed job named (the usual epoch): nothing to preempt, without a scan of all jobs
        preempt = [] if kept + len(moving) == self.n_placed else [j for j in self.active.values() if j.status in _PLACED and j.sim.spec.id not in seen]
        mem: dict[int, float] = {}
        count: dict[int, int] = {}
        leaving = preempt + moving
        for j in leaving:
            assert j.profile is not None
            for g in j.gpus:
                mem[g] = mem.get(g, self.gpu_est[g]) - j.profile.resources.gpu_mem_mib
                count[g] = count.get(g, len(self.on_gpu[g])) - 1
        for _, _, gpus, prof in changed:
            for g in gpus:
                mem[g] = mem.get(g, self.gpu_est[g]) + prof.resources.gpu_mem_mib
                count[g] = count.get(g, len(self.on_gpu[g])) + 1
        for g in sorted(mem):
            if count[g] > self.cluster.max_jobs_per_gpu:
                raise DecisionError(f"{who} put {count[g]} jobs on {self.gpu_ids[g]} (max {self.cluster.max_jobs_per_gpu})")
            if mem[g] > self.usable + 1e-3:
                raise DecisionError(f"{who} over-commits {self.gpu_ids[g]}: {mem[g]:.0f} MiB of {self.usable:.0f} MiB")
        return changed, preempt

    def _apply(self, decision: Decision, t: float) -> None:
        items, preempt = self._validate(decision)
        costs = self.cfg.costs
        changes: list[tuple[_Job, Assignment, tuple[int, ...], Profile, float, str]] = []
        for j, a, gpus, prof in items:
            w = j.sim.spec.workload
            if not j.placed:
                if math.isnan(j.first_start):
                    changes.append((j, a, gpus, prof, 0.0, "start"))
                else:
                    changes.append((j, a, gpus, prof, costs.restart_s(w), "resume"))
                continue
            assert j.knobs is not None
            same_gpus = sorted(gpus) == sorted(j.gpus)
            kind = change_kind(j.sim.spec.knob_space, j.knobs, a.knobs)
            if same_gpus and kind is None:
                continue
            if same_gpus:
                assert kind is not None
                changes.append((j, a, gpus, prof, costs.change_s(w, kind), "switch"))
            else:
                changes.append((j, a, gpus, prof, costs.migrate_s(w, kind), "migrate"))
        if not changes and not preempt:
            return
        touched: set[int] = set()
        for j in preempt:
            touched.update(j.gpus)
        for j, _, gpus, _, _, _ in changes:
            touched.update(j.gpus)
            touched.update(gpus)
        self._integrate_gpus(touched, t)
        for j, *_ in changes:
            self._integrate(j, t)
        for j in preempt:
            self._record(t, "preempt", j.sim.spec.id)
            self._unplace(j)
            j.view = None
            j.status = _Status.PENDING
            j.queued_since = t
            j.preemptions += 1
            j.version += 1
            self.n_placed -= 1
            self.n_pending += 1
        for j, *_ in changes:
            if j.placed:
                self._unplace(j)
        out: list[Event] = []
        changed_on: dict[int, list[_Job]] = {}
        for j, a, gpus, prof, cost, what in changes:
            self._record(t, what, j.sim.spec.id)
            if not j.placed:
                self.n_pending -= 1
                self.n_placed += 1
            if what == "start":
                j.first_start = t
            elif what == "switch":
                j.switches += 1
                j.checkpoint_resumes += int(change_kind(j.sim.spec.knob_space, j.knobs or a.knobs, a.knobs) is ChangeKind.CHECKPOINT_RESUME)
            elif what == "migrate":
                j.migrations += 1
                j.checkpoint_resumes += int(j.sim.spec.kind is JobKind.TRAIN)
            elif what == "resume":
                j.checkpoint_resumes += int(j.sim.spec.kind is JobKind.TRAIN)
            j.knobs = a.knobs
            j.current = a
            j.profile = prof
            j.mem = self.truth.memory_mib(j.sim.spec.workload, prof, self.usable)
            j.version += 1
            j.last_t = t
            j.status = _Status.CHANGING if cost > 0 else _Status.RUNNING
            j.crash = False
            self._place(j, gpus)
            for g in gpus:
                changed_on.setdefault(g, []).append(j)
            if cost > 0:
                out.append(TransitionDone(t + cost, j.sim.spec.id, j.version))
        out += self._memory_truth(changed_on, t)
        if self.meter is not None:
            for j in preempt:
                self._meter(j)
            for j, *_ in changes:
                self._meter(j)
        self._refresh(touched, t)
        self._sample(t)
        for ev in out:
            self.engine.schedule(ev)

    def _memory_truth(self, changed_on: dict[int, list[_Job]], t: float) -> list[Event]:
        """Jobs whose change overflows a GPU's real memory crash at the end of their start-up.

        The job that crashes is the one this decision changed (the running partner already holds its
        memory); among several, the last by id. It keeps its memory until the crash.
        """
        out: list[Event] = []
        cap = self.usable
        for g in sorted(changed_on):
            total = sum(self.jobs[jid].mem for jid in self.on_gpu[g] if not self.jobs[jid].crash)
            while total > cap + 1e-6:
                victims = [j for j in changed_on[g] if not j.crash]
                if not victims:
                    break
                v = max(victims, key=lambda j: j.sim.spec.id)
                v.crash = True
                v.version += 1
                v.status = _Status.CHANGING
                v.view = None
                total -= v.mem
                delay = self.cfg.costs.restart_s(v.sim.spec.workload)
                out.append(TransitionDone(t + delay, v.sim.spec.id, v.version, oom=True))
        return out

    # ---- bookkeeping -------------------------------------------------------------------------
    def _place(self, j: _Job, gpus: tuple[int, ...]) -> None:
        j.gpus = gpus
        for g in gpus:
            if not self.on_gpu[g]:
                self.busy += 1
            self.on_gpu[g] = (*self.on_gpu[g], j.sim.spec.id)
            self.gpu_mem[g] += j.mem
            self.gpu_est[g] += j.profile.resources.gpu_mem_mib if j.profile else 0.0
            self.tot_mem += j.mem
            self._over(g)
        j.view = None

    def _over(self, g: int) -> None:
        excess = self.gpu_mem[g] - self.usable
        if excess > 1e-6:
            self.mem_over[g] = excess
        else:
            self.mem_over.pop(g, None)

    def _unplace(self, j: _Job) -> None:
        for g in j.gpus:
            self.on_gpu[g] = tuple(x for x in self.on_gpu[g] if x != j.sim.spec.id)
            if not self.on_gpu[g]:
                self.busy -= 1
            self.gpu_mem[g] -= j.mem
            self.gpu_est[g] -= j.profile.resources.gpu_mem_mib if j.profile else 0.0
            self.tot_mem -= j.mem
            self._over(g)
        j.gpus = ()
        j.speed = 0.0
        j.view = None

    def _integrate(self, j: _Job, t: float) -> None:
        dt = t - j.last_t
        if dt > 0:
            if j.status is _Status.RUNNING:
                j.work_done = min(j.sim.spec.work, j.work_done + j.speed * dt)
            if j.placed:
                j.held_s += dt
                if j.status is _Status.CHANGING:
                    j.changing_s += dt
                    j.changing_gpu_s += dt * len(j.gpus)
        j.last_t = t

    def _integrate_gpus(self, gpus: set[int], t: float) -> None:
        for g in gpus:
            for jid in self.on_gpu[g]:
                self._integrate(self.jobs[jid], t)

    def _slowdown_on(self, j: _Job, g: int) -> float:
        s = 1.0
        assert j.profile is not None
        for other_id in self.on_gpu[g]:
            if other_id == j.sim.spec.id:
                continue
            o = self.jobs[other_id]
            if o.status is not _Status.RUNNING or o.crash or o.profile is None:
                continue
            s += self.truth.slowdown(j.sim.spec.workload, j.profile, o.sim.spec.workload, o.profile, self.device_mem) - 1.0
        return s

    def _refresh(self, touched: set[int], t: float) -> None:
        """Recompute the speed of every job on ``touched`` GPUs and the GPUs' aggregates."""
        jobs: dict[str, _Job] = {}
        for g in touched:
            for jid in self.on_gpu[g]:
                jobs[jid] = self.jobs[jid]
        gpus = set(touched)
        for j in jobs.values():
            gpus.update(j.gpus)
            self._integrate(j, t)
            if j.status is not _Status.RUNNING or j.crash:
                if j.speed != 0.0:
                    j.speed = 0.0
                    j.view = None
                continue
            assert j.profile is not None
            worst = max(self._slowdown_on(j, g) for g in j.gpus)
            speed = j.profile.throughput / worst
            if speed != j.speed or j.sched != j.version:  # the scheduled finish no longer holds
                j.speed = speed
                j.view = None
                j.version += 1
                j.sched = j.version
                left = max(0.0, j.sim.spec.work - j.work_done)
                self.engine.schedule(JobFinish(t + left / speed, j.sim.spec.id, j.version))
        for g in gpus:
            sm = rate = 0.0
            for jid in self.on_gpu[g]:
                o = self.jobs[jid]
                if o.status is _Status.RUNNING and not o.crash and o.profile is not None and o.speed > 0:
                    frac = o.speed / o.profile.throughput
                    sm += o.profile.resources.sm * frac
                    rate += o.speed / o.sim.spec.work * o.sim.norm_work / len(o.gpus)
            sm = min(1.0, sm)
            self.tot_sm += sm - self.gpu_sm[g]
            self.tot_rate += rate - self.gpu_rate[g]
            self.gpu_sm[g] = sm
            self.gpu_rate[g] = rate
        if self.watcher is not None:
            self.watcher.gpus_changed(t, {g: self._running_on(g) for g in sorted(gpus)})

    def _running_on(self, g: int) -> tuple[Running, ...]:
        out = []
        for jid in self.on_gpu[g]:
            o = self.jobs[jid]
            if o.status is _Status.RUNNING and not o.crash and o.profile is not None and o.speed > 0:
                out.append(Running(jid, o.sim.spec.workload, o.profile, o.speed, len(o.gpus)))
        return tuple(out)

    def _sample(self, t: float) -> None:
        if self.meter is not None:
            self.meter.sample(t)
        mem = self.tot_mem - sum(self.mem_over.values()) if self.mem_over else self.tot_mem
        row = (t, max(0.0, self.tot_sm), max(0.0, mem), self.busy, max(0.0, self.tot_rate), self.n_placed, self.n_pending)
        if self.series and self.series[-1][0] == t:
            self.series[-1] = row
        else:
            self.series.append(row)

    # ---- run ---------------------------------------------------------------------------------
    def run(self) -> tuple[bool, float]:
        for sj in sorted(self.jobs.values(), key=lambda j: (j.sim.spec.submit_time_s, j.sim.spec.id)):
            self.engine.schedule(JobArrival(sj.sim.spec.submit_time_s, sj.sim.spec.id))
        self._sample(0.0)
        self.engine.run(self.handle, until=self.cfg.max_time_s)
        end = self.engine.now
        truncated = self.unfinished > 0
        for j in self.active.values():
            self._integrate(j, end)
        return truncated, end


def _record(j: _Job) -> JobRecord:
    spec = j.sim.spec
    return JobRecord(
        job_id=spec.id,
        kind=spec.kind.value,
        workload=spec.workload.name,
        user=spec.user,
        submit_s=spec.submit_time_s,
        dp=j.sim.dp,
        first_start_s=j.first_start,
        finish_s=j.finish,
        work=spec.work,
        norm_work=j.sim.norm_work,
        work_done=j.work_done,
        floor=spec.floor,
        default_throughput=j.sim.default_throughput,
        held_s=j.held_s,
        changing_s=j.changing_s,
        changing_gpu_s=j.changing_gpu_s,
        switches=j.switches,
        migrations=j.migrations,
        preemptions=j.preemptions,
        ooms=j.ooms,
        checkpoint_resumes=j.checkpoint_resumes,
        final_knobs=j.knobs.short() if j.knobs is not None else "",
    )


def simulate(
    trace: Trace | Sequence[SimJob],
    policy: Policy,
    cluster: Cluster,
    seed: int = 0,
    *,
    store: ProfileStore,
    truth: GroundTruth | None = None,
    config: SimConfig = SimConfig(),
    progress: Callable[[float], None] | None = None,
    watcher: SimWatcher | None = None,
) -> SimResult:
    """Replay ``trace`` through ``policy`` on ``cluster`` (module doc); a plain function, no I/O."""
    t0 = time.perf_counter()
    book = ProfileBook.for_cluster(store, cluster)
    jobs = build_jobs(trace, cluster, book, config.floor_frac) if isinstance(trace, Trace) else tuple(trace)
    name = trace.name if isinstance(trace, Trace) else "jobs"
    run = _Run(jobs, policy, cluster, book, truth if truth is not None else ContentionTruth(seed=seed), seed, config, progress,
               watcher)
    truncated, end = run.run()
    records = tuple(_record(j) for j in sorted(run.jobs.values(), key=lambda j: (j.sim.spec.submit_time_s, j.sim.spec.id)))
    span = max((j.submit_s for j in records), default=0.0)
    finish = max((j.finish_s for j in records if j.finished), default=0.0)
    window = span if span > 0 else finish
    cols = list(zip(*run.series, strict=True)) if run.series else [()] * 7
    series = Series(*(np.asarray(c, dtype=float) for c in cols))
    notes = list(run.notes)
    if truncated:
        notes.append(f"stopped at {config.max_time_s:.0f} s with {run.unfinished} jobs unfinished")
    return SimResult(
        policy=policy.kind.value,
        trace=name,
        gpus=len(cluster.gpus),
        seed=seed,
        usable_mem_mib=float(book.gpu.memory_mib - cluster.m_sys_mib),
        window_s=window,
        end_s=end,
        jobs=records,
        series=series,
        decide_ms=tuple(run.decide_ms),
        decide_at=tuple(run.decide_at),
        events=run.engine.processed,
        stale_events=run.stale,
        wall_s=time.perf_counter() - t0,
        truncated=truncated,
        event_log=tuple(run.log),
        notes=tuple(notes),
        queues=run.meter.trace() if run.meter is not None else None,
    )
