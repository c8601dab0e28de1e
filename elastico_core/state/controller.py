"""The controller: Algorithm 1 every ΔT against the persistent state (one process; a lease keeps it single).

One epoch (``Controller.run_epoch``):

0. check that the state is still the one this controller started with (``state.identity``: a deleted or
   re-created SQLite file, a re-created database, is an error to report, never a new state to plan into);
1. take or renew the controller lease (another live controller has it: skip the epoch);
2. mirror the cluster into the GPU ledger (only when it changed);
3. fold launcher reports into the profile store (OOM corrections every epoch, throughputs every
   ``feedback_interval_s``) and rebuild the planner when profiles changed;
4. read a snapshot: every admitted/running/switching job and the first ``max_pending`` of the queue
   (skipped, with planning, when nothing changed since a plan that changed nothing: an idle cluster
   costs a few milliseconds per epoch);
5. build each job's ``JobSpec`` (cached by spec hash and knob limits: the planner's per-job caches key on
   object identity), narrow the space of jobs just OOM-killed (``faults``), fail jobs that cannot be built;
6. ``Planner.plan`` on that input, warm-started from the last recorded prices;
7. record everything in one transaction (``recorder``): decisions with reasons, prices, ledger, epoch.

The controller never launches anything: launchers (the Airflow operator, the local launcher) poll
``JobService`` and start what a committed plan says. That is what makes a SIGKILL at any point safe.

The loop (``Controller.run``) heals: any failed epoch is followed by a wait that doubles from ΔT up to
``max_backoff_s`` and resets on the first epoch that runs; the store drains its pool on a read-only or
unreachable error, so no connection from a bad spell is used again; a state unreachable at start is
retried the same way (``open_with_retry``). Blast radius of one: a job fails here only when its own
document cannot be built; the profile data's trouble sets it aside (``Planner.prepare``), never fails it.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from sqlalchemy.exc import IntegrityError

from elastico_core.iac.predictor import NoInterference, SlowdownPredictor
from elastico_core.model.cluster import Cluster
from elastico_core.model.errors import ElasticoError, SpecError
from elastico_core.model.hardware import gpu_model
from elastico_core.model.job import JobSpec
from elastico_core.model.knobs import Knobs
from elastico_core.model.plan import QueueCode
from elastico_core.model.planning import PlanningInput
from elastico_core.model.state import Assignment
from elastico_core.pds.planner import Planner
from elastico_core.pds.rules import PRODUCTION, ElasticoRules, OomStep, apply_limits, merge_limits
from elastico_core.rst.store import ProfileStore
from elastico_core.state.clusters import sync_cluster
from elastico_core.state.db import StateStore
from elastico_core.state.deadline import release_unstarted
from elastico_core.state.errors import LeaseLost, StateUnavailable
from elastico_core.state.feedback import feed_profiles
from elastico_core.state.identity import StateIdentity, check_identity, read_identity
from elastico_core.state.lease import Lease, acquire, holder_of, new_holder_id, release
from elastico_core.state.models import DEFAULT_CONTROLLER, utcnow
from elastico_core.state.recorder import EpochInput, JobChange, Stage, read_owed, record_epoch
from elastico_core.state.snapshot import AssignmentCache, JobRow, Snapshot, fingerprint, load_snapshot, load_specs
from elastico_core.state.specs import build_spec, canonical_json
from elastico_core.state.values import DecisionKind, JobStatus

log = logging.getLogger("elastico.controller")
# how long a launch may take before the start deadline counts: KubernetesPodOperator's default
# ``startup_timeout_seconds`` (image pull, scheduling); the local launcher starts in seconds
LAUNCH_TIMEOUT_S = 120.0
START_DEADLINE_EPOCHS = 3
ORDER_ORIGIN = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)  # submit_time_s of a job = seconds since this


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Settings of the controller loop (what it plans by is ``ElasticoRules``, shared with the simulator)."""

    interval_s: float = field(default=5.0, metadata={"help": "ΔT: seconds between epoch starts"})
    max_pending: int = field(default=2000, metadata={"help": "pending jobs planned per epoch (queue head)"})
    lease_ttl_s: float = field(default=30.0, metadata={"help": "a silent controller loses its lease after this"})
    feedback_interval_s: float = field(default=30.0, metadata={"help": "how often throughputs reach the profile store"})
    planner_refresh_epochs: int = field(default=720, metadata={"help": "rebuild the planner (drops its caches) this often"})
    name: str = field(default=DEFAULT_CONTROLLER, metadata={"help": "lease row to compete for"})
    max_backoff_s: float = field(default=60.0, metadata={"help": "longest wait between tries while the state is unavailable"})
    start_deadline_s: float | None = field(default=None, metadata={
        "help": "release an admitted job not started within this many seconds (None: the launch timeout + 3 epochs; 0: never)"})

    @property
    def start_deadline(self) -> float:
        """Seconds an admitted job may take to start: the launch timeout plus a few epochs by default."""
        if self.start_deadline_s is not None:
            return self.start_deadline_s
        return LAUNCH_TIMEOUT_S + START_DEADLINE_EPOCHS * max(self.interval_s, 1.0)

    def __post_init__(self) -> None:
        if not (self.interval_s >= 0 and math.isfinite(self.interval_s)):
            raise SpecError(f"must be a finite number >= 0, got {self.interval_s!r}", field="interval")
        if self.max_pending < 1:
            raise SpecError(f"must be >= 1, got {self.max_pending!r}", field="max_pending")
        if not self.lease_ttl_s > 0:
            raise SpecError(f"must be > 0, got {self.lease_ttl_s!r}", field="lease_ttl")
        if self.start_deadline_s is not None and not (self.start_deadline_s >= 0 and math.isfinite(self.start_deadline_s)):
            raise SpecError(f"must be a finite number >= 0, got {self.start_deadline_s!r}", field="start_deadline")
        if not (self.max_backoff_s >= 0 and math.isfinite(self.max_backoff_s)):
            raise SpecError(f"must be a finite number >= 0, got {self.max_backoff_s!r}", field="max_backoff")


def backoff_s(config: ControllerConfig, streak: int) -> float:
    """Seconds to wait after ``streak`` failed tries in a row: ΔT (at least 1 s) doubling up to ``max_backoff_s``."""
    return min(config.max_backoff_s, max(config.interval_s, 1.0) * 2 ** min(streak - 1, 30))


@dataclass(frozen=True, slots=True)
class Opened:
    """The state a controller starts on (None: stopped before it answered) and the failed tries before."""

    store: StateStore | None
    failures: int


def open_with_retry(
    open_store: Callable[[], StateStore], config: ControllerConfig, stop: threading.Event, *, tries: int | None = None
) -> Opened:
    """Open the state as the loop retries it later: an unavailable state at start waits with the same backoff.

    :param tries: give up (raise the last ``StateUnavailable``) after this many (None: until ``stop``).
    """
    failures = 0
    while not stop.is_set():
        try:
            return Opened(open_store(), failures)
        except StateUnavailable as exc:
            failures += 1
            if tries is not None and failures >= tries:
                raise
            wait = backoff_s(config, failures)
            log.warning("state not available at start: %s; retrying in %.0f s (failure %d in a row)", exc, wait, failures)
            stop.wait(wait)
    return Opened(None, failures)


@dataclass(frozen=True, slots=True)
class RunResult:
    """What ``Controller.run`` did: epochs run, and how many of them failed (the CLI's exit code)."""

    epochs: int
    failed: int

    @property
    def ok(self) -> bool:
        return self.failed == 0


@dataclass(frozen=True, slots=True)
class EpochReport:
    """What one call of ``run_epoch`` did (``epoch`` is the last recorded epoch number)."""

    recorded: bool
    epoch: int
    skipped: str | None = None
    planned: int = 0
    pending_total: int = 0
    placed: int = 0
    queued: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)
    fed: int = 0
    timings_ms: Mapping[str, float] = field(default_factory=dict)
    idle: bool = False  # nothing changed since a plan that changed nothing: not planned again

    def summary(self) -> str:
        if self.skipped:
            return f"epoch skipped: {self.skipped}"
        if self.idle:
            return f"idle (epoch {self.epoch}): nothing changed since the last plan"
        c = self.counts
        head = f"epoch {self.epoch}" if self.recorded else f"no change (epoch {self.epoch})"
        parts = [f"{k} {v}" for k, v in c.items() if v]
        t = self.timings_ms
        return (
            f"{head}: planned {self.planned} jobs ({self.pending_total} pending in all), placed {self.placed}, "
            f"queued {self.queued}" + (f"; {', '.join(parts)}" if parts else "")
            + f" | load {t.get('load', 0):.0f} ms, plan {t.get('plan', 0):.0f} ms, record {t.get('record', 0):.0f} ms"
        )


class Controller:
    """Runs planning epochs against a ``StateStore`` (see the module docstring).

    :param hook: called at each ``Stage`` of an epoch; tests use it to crash the process at chosen points.
    """

    def __init__(
        self,
        store: StateStore,
        cluster: Cluster,
        profiles: ProfileStore,
        *,
        config: ControllerConfig | None = None,
        predictor: SlowdownPredictor | None = None,
        rules: ElasticoRules | None = None,
        hook: Callable[[Stage], None] | None = None,
        holder: str | None = None,
        cluster_yaml: str | None = None,
        predictor_source: Callable[[], SlowdownPredictor] | None = None,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.profiles = profiles
        self.config = config or ControllerConfig()
        self.predictor = predictor or NoInterference()
        self.predictor_source = predictor_source  # asked every epoch: a new object (a new champion) replans with it
        self.rules = rules or PRODUCTION
        self.planning_cluster = self.rules.planning_cluster(cluster)  # less the memory margin
        self.hook = hook
        self.holder = holder or new_holder_id()
        self.cluster_yaml = cluster_yaml
        self.lease: Lease | None = None
        self._planner: Planner | None = None
        self._epochs_on_planner = 0
        self._synced = False
        self._last_feed = -math.inf
        self._specs: dict[str, tuple[tuple[str, str, float], JobSpec]] = {}
        self._bad: dict[str, tuple[str, str]] = {}  # job -> (spec hash, why it cannot be planned)
        self._said: set[str] = set()
        self._assignments: AssignmentCache = {}
        self._quiet: tuple[tuple[int, ...], Planner, int] | None = None  # state fingerprint of a plan that changed nothing
        self.identity: StateIdentity | None = None  # the state this controller plans for (read at its first epoch)
        # with queues: the jobs owed quota their queue lent, and for how many epochs (the last plan's
        # ``owed``); recorded with each epoch's queue states and read back by a controller started again
        # (None until then), so a restart does not move the reclaim deadline
        self._owed: dict[str, int] | None = None

    # ---- the loop ------------------------------------------------------------------------------
    def run(
        self, *, stop: threading.Event | None = None, max_epochs: int | None = None, raise_errors: bool = False
    ) -> RunResult:
        """Run epochs every ``interval_s`` until ``stop`` is set (or ``max_epochs``).

        A failed epoch — the state unavailable, replaced or deleted, or any error while planning — is logged
        (one line; a traceback only the first time the same error repeats) and followed by a wait that
        doubles from ΔT up to ``max_backoff_s``; the first epoch that succeeds resets it. Nothing of a
        failed epoch is recorded, so the next one starts from the committed state.
        """
        stop = stop or threading.Event()
        done = failed = 0
        streak = 0  # consecutive failed epochs: the wait doubles with each
        last_error = ""
        try:
            while not stop.is_set():
                t0 = time.monotonic()
                wait = self.config.interval_s
                try:
                    report = self.run_epoch()
                    log.info(report.summary())
                    if streak:
                        log.warning("controller healed: epoch ran after %d failed in a row", streak)
                    streak, last_error = 0, ""
                except Exception as exc:
                    if raise_errors:
                        raise
                    streak += 1
                    failed += 1
                    wait = backoff_s(self.config, streak)
                    self.lease = None  # whatever it held lapses by itself; a fresh acquire follows
                    if isinstance(exc, StateUnavailable):  # read-only, unreachable, deleted, replaced: one line
                        log.warning("epoch not run: %s; retrying in %.0f s (failure %d in a row)", exc, wait, streak)
                    else:
                        what = f"{type(exc).__name__}: {exc}"
                        log.error("epoch failed: %s; retrying in %.0f s (failure %d in a row)", what[:500], wait, streak,
                                  exc_info=what != last_error)  # fmt: skip
                        last_error = what
                done += 1
                if max_epochs is not None and done >= max_epochs:
                    break
                stop.wait(max(0.0, wait - (time.monotonic() - t0)))
        finally:
            self.close()
        return RunResult(done, failed)

    def close(self) -> None:
        """Give the lease back so a standby controller can start at once."""
        if self.lease is not None:
            try:
                release(self.store, self.lease)
            except StateUnavailable as exc:  # it lapses after its TTL instead
                log.warning("lease not released: %s", exc)
            finally:
                self.lease = None

    # ---- one epoch -----------------------------------------------------------------------------
    def run_epoch(self) -> EpochReport:
        t0 = time.perf_counter()
        started = utcnow()
        self._check_identity()
        self.lease = acquire(self.store, self.holder, self.config.lease_ttl_s, self.config.name)
        if self.lease is None:
            holder, _ = holder_of(self.store, self.config.name)
            return EpochReport(False, 0, skipped=f"the controller lease is held by {holder}")
        if not self._synced:
            changed = sync_cluster(self.store, self.cluster, self.cluster_yaml, self.config.name)
            if changed:
                log.info("GPU ledger synced with cluster %r: %d GPU rows changed", self.cluster.name, changed)
            self._synced = True
        released = release_unstarted(self.store, self.config.start_deadline)
        for r in released:
            log.warning("job %s released: admitted %.0f s ago and never started (start deadline %g s); re-queued",
                        r.job_id, r.waited_s, self.config.start_deadline)
        fed = self._feed()
        planner = self._get_planner()
        t_feed = time.perf_counter()
        if self._quiet is not None and planner is self._quiet[1] and fingerprint(self.store) == self._quiet[0]:
            # the last plan, from exactly this state, changed nothing: planning again would repeat it
            t = (time.perf_counter() - t0) * 1e3
            return EpochReport(False, self._quiet[2], idle=True, timings_ms={"feed": (t_feed - t0) * 1e3, "total": t})
        self._quiet = None

        snap = load_snapshot(self.store, self.config.max_pending, self.config.name, self._assignments)
        specs, changes = self._specs_for(snap)
        running: dict[str, Assignment] = {}
        for job_id in snap.active:
            a = snap.rows[job_id].assignment
            if a is not None and job_id in specs:
                running[job_id] = a
        failed = {c.job_id for c in changes if c.kind is DecisionKind.FAIL}
        jobs = tuple(specs[j] for j in snap.rows if j in specs and j not in failed)
        waiting = frozenset(j for j in snap.pending if snap.rows[j].queue_code is not None and j not in failed)
        t_load = time.perf_counter()

        if self._owed is None:
            self._owed = self.store.read(read_owed) if self.cluster.queues else {}
        owed = MappingProxyType({j: n for j, n in self._owed.items() if j in snap.rows})
        plan = planner.plan(PlanningInput(self.planning_cluster, jobs, running=running, prices=snap.prices, waiting=waiting,
                                          owed=owed))
        self._owed = dict(plan.owed)
        self._epochs_on_planner += 1
        t_plan = time.perf_counter()
        notes = (*plan.notes, *self._cold_start_notes(jobs))
        for note in notes:
            self._say(note, logging.WARNING if note.startswith("profile store") else logging.INFO)
        if self.hook is not None:
            self.hook(Stage.PLANNED)

        inp = EpochInput(snap, plan, specs, self.cluster, tuple(changes), started, (t_plan - t_load) * 1e3, notes)
        try:
            result = record_epoch(self.store, self.lease, self.config.lease_ttl_s, inp, self.hook)
        except LeaseLost as exc:
            log.warning("%s", exc)
            self.lease = None
            return EpochReport(False, snap.epoch, skipped=str(exc))
        except IntegrityError as exc:  # another controller committed this epoch number (or a token) first
            log.warning("epoch not recorded: another controller recorded first (%s)", type(exc.orig).__name__)
            return EpochReport(False, snap.epoch, skipped="another controller recorded this epoch first")
        self.lease = result.lease
        set_aside = any(q.code is QueueCode.SET_ASIDE for q in plan.queued)  # retried every epoch
        if not result.recorded and not set_aside and not plan.owed:  # a reclaim in progress counts epochs
            self._quiet = (snap.fingerprint, planner, result.epoch)
        t_rec = time.perf_counter()
        if result.recorded and self.hook is not None:
            self.hook(Stage.RECORDED)
        timings = {
            "feed": (t_feed - t0) * 1e3, "load": (t_load - t_feed) * 1e3, "plan": (t_plan - t_load) * 1e3,
            "record": (t_rec - t_plan) * 1e3, "total": (t_rec - t0) * 1e3,
        }
        counts = {**result.counts, "released": len(released)}
        return EpochReport(result.recorded, result.epoch, None, len(jobs), snap.pending_total, len(plan.placements),
                           len(plan.queued), counts, fed, timings)

    # ---- pieces --------------------------------------------------------------------------------
    def _check_identity(self) -> None:
        """The state is still the one this controller started with (``state.identity``), else raise."""
        if self.identity is None:
            self.identity = read_identity(self.store)
            log.info("state %s is state %s", self.store.url, self.identity.short())
        else:
            self.identity = check_identity(self.store, self.identity)

    def _get_planner(self) -> Planner:
        if self.predictor_source is not None and (fresh := self.predictor_source()) is not self.predictor:
            log.info("planning with interference predictor %s from now on", fresh.name)
            self.predictor, self._planner = fresh, None
        if self._planner is None or self._epochs_on_planner >= self.config.planner_refresh_epochs:
            self._planner = Planner(self.profiles, self.rules.iac_view(self.predictor), self.rules.planner)
            self._epochs_on_planner = 0
            self.profiles.frame()  # load now, so defects are reported before planning
            for note in self.profiles.notes():  # the plan repeats them as notes: ``_say`` logs each once
                self._say(note, logging.WARNING)
        return self._planner

    def _cold_start_notes(self, jobs: Sequence[JobSpec]) -> tuple[str, ...]:
        """The workloads the interference model has not seen while the rules explore them
        (``ElasticoRules.cold_start_note``): what their pairs' predicted slowdowns are, until a retraining."""
        note = self.rules.cold_start_note(self.predictor, (j.workload.name for j in jobs))
        return () if note is None else (note,)

    def _say(self, message: str, level: int) -> None:
        """Log a message once per controller process (notes repeat every epoch)."""
        if message not in self._said:
            self._said.add(message)
            log.log(level, "%s", message)

    def _feed(self) -> int:
        include = time.monotonic() - self._last_feed >= self.config.feedback_interval_s
        try:
            result = feed_profiles(self.store, self.profiles, self._spec_of, include_throughput=include)
        except StateUnavailable:
            raise
        except Exception as exc:  # the store could not be written (disk full, permissions): plan with what it has
            self._say(f"profile feedback not folded in ({type(exc).__name__}: {str(exc)[:200]}); the reports "
                      "stay unfed and are retried", logging.WARNING)  # fmt: skip
            return 0
        if include:
            self._last_feed = time.monotonic()
        for note in result.notes:
            self._say(f"profile feedback: {note}", logging.INFO)
        if result.upserted:
            log.info("profile store: %d rows from launcher reports (%d OOM corrections)", result.upserted, result.corrections)
            self._planner = None  # its option caches hold the old profiles
        return result.upserted

    def _spec_of(self, job_id: str) -> JobSpec | None:
        cached = self._specs.get(job_id)
        if cached is not None:
            return cached[1]
        doc = load_specs(self.store, [job_id]).get(job_id)
        if doc is None:
            return None
        try:
            return build_spec(doc, f"job {job_id!r}")
        except SpecError:
            return None

    def _specs_for(self, snap: Snapshot) -> tuple[dict[str, JobSpec], list[JobChange]]:
        """Every snapshot job's planner spec (cached), OOM narrowing and unusable specs as changes.

        Blast radius of one: a job fails here only when its own document cannot be built. Evaluating it
        against the profile store happens inside ``Planner.plan``, which sets a job aside (pending, queue
        code ``set-aside``, retried every epoch) when that raises: profile data are never a job's fault.
        """
        keys: dict[str, tuple[str, str, float]] = {}
        for job_id, row in snap.rows.items():
            limits = canonical_json(row.knob_limits) if row.knob_limits else ""
            keys[job_id] = (row.spec_hash, limits, (row.queued_at - ORDER_ORIGIN).total_seconds())
        misses = [j for j, k in keys.items() if (c := self._specs.get(j)) is None or c[0] != k]
        misses = [j for j in misses if self._bad.get(j, ("", ""))[0] != snap.rows[j].spec_hash]
        docs = load_specs(self.store, misses)
        for job_id in misses:
            row = snap.rows[job_id]
            try:  # only the job's own document (and OOM limits) go in: a failure here is its own fault
                spec = self._planner_spec(docs[job_id], row, keys[job_id][2])
            except Exception as exc:
                why = str(exc) if isinstance(exc, ElasticoError) else f"{type(exc).__name__}: {exc}"
                self._bad[job_id] = (row.spec_hash, why[:500])
                self._specs.pop(job_id, None)
                continue
            self._specs[job_id] = (keys[job_id], spec)
            self._bad.pop(job_id, None)
        for gone in set(self._specs) - set(snap.rows):
            del self._specs[gone]
        for gone in set(self._bad) - set(snap.rows):
            del self._bad[gone]

        out: dict[str, JobSpec] = {}
        changes: list[JobChange] = []
        for job_id, row in snap.rows.items():
            if job_id in self._bad:
                if row.status is JobStatus.PENDING:
                    changes.append(JobChange(job_id, DecisionKind.FAIL, f"cannot be planned: {self._bad[job_id][1]}"))
                else:
                    self._say(f"job {job_id!r} holds GPUs but its spec cannot be rebuilt: {self._bad[job_id][1]}", logging.ERROR)
                continue
            spec = self._specs[job_id][1]
            if row.status is JobStatus.PENDING and row.oom_pending:
                try:
                    change, spec_after = self._after_oom(row, spec)
                except Exception as exc:  # the store's figures, not the job: leave it out, retry next epoch
                    self._say(f"job {job_id!r} set aside this epoch: its OOM narrowing raised {type(exc).__name__}: "
                              f"{str(exc)[:200]}", logging.WARNING)  # fmt: skip
                    continue
                changes.append(change)
                if spec_after is None:
                    continue
                spec = spec_after
            out[job_id] = spec
        return out, changes

    def _planner_spec(self, doc: Mapping[str, object], row: JobRow, order_s: float) -> JobSpec:
        spec = build_spec(doc, f"job {row.id!r}")
        spec = apply_limits(spec, row.knob_limits)  # type: ignore[arg-type]
        return replace(spec, submit_time_s=max(0.0, order_s))  # FIFO by queue time within a priority

    def _after_oom(self, row: JobRow, spec: JobSpec) -> tuple[JobChange, JobSpec | None]:
        """ElastiCo's OOM rule (``ElasticoRules.after_oom``): narrow the job, fall back to its default, or fail it."""
        info = dict(row.oom_pending or {})
        failed = Knobs.of(info.get("knobs") or {})
        budget = float(info.get("budget_mib") or 0.0)
        try:
            model = gpu_model(str(info.get("gpu_model") or ""))
        except SpecError:
            model = self.cluster.gpu_models()[0]

        def mem_of(knobs: Knobs) -> float | None:
            p = self.profiles.lookup(spec.workload, knobs, model)
            return None if p is None else p.resources.gpu_mem_mib

        compiler = self._get_planner().compiler(self.planning_cluster)
        # compare like with like: what the failed configuration really needed (its corrected row) against
        # the others' predictions from the same, now calibrated, store
        baseline = max(budget, mem_of(failed) or 0.0)
        out = self.rules.after_oom(spec, failed, row.oom_kills, baseline, mem_of, lambda s: compiler.options(s).problem is None)
        if out.step is OomStep.GIVE_UP or out.limits is None:
            return JobChange(row.id, DecisionKind.FAIL, out.why, from_knobs=failed), None
        merged = merge_limits(row.knob_limits, out.limits) if out.step is OomStep.NARROW else out.limits  # type: ignore[arg-type]
        return JobChange(row.id, DecisionKind.NARROW, out.why, merged, failed), apply_limits(spec, out.limits)
