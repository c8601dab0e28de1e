"""``JobService``: the facade the Airflow side and the CLI use. Frozen values in, frozen values out, no rows.

Every method is one transaction (retried on deadlock or a busy SQLite file), idempotent where a launcher
may repeat itself after a crash:

* ``register`` twice with the same identity returns the first registration (``created=False``); a task
  retried after its worker died therefore reattaches to its job, its plan and its token;
* ``report_*`` with a token the job has already moved past is refused (``StateConflict``), the same report
  repeated is a no-op; a launcher must only start a process for the token the job shows (``JobView.token``).

Lifecycle (only the controller leaves ``pending``; it never launches anything itself)::

    register -> pending --controller--> admitted --report_started--> running --report_finished--> finished
                   ^   \\--(window)        |  \\--controller: switch/migrate--> switching --acknowledge--> running
                   |                      |                                   (report_started(target token) too)
                   +-- report_oom (re-planned at lower memory) / controller preempt
    any non-terminal --cancel--> cancelled;  failed/cancelled --requeue--> pending

Threading: one ``JobService`` may be shared by threads (SQLAlchemy pools connections); call it from a
thread (``asyncio.to_thread``) inside an Airflow trigger, it does blocking I/O.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import IntegrityError

from elastico_core.model.cluster import Cluster
from elastico_core.model.errors import SpecError
from elastico_core.model.knobs import Knobs
from elastico_core.model.plan import Prices, QueueStatus
from elastico_core.state.db import StateStore
from elastico_core.state.errors import StateConflict, UnknownJob
from elastico_core.state.ledger import Ledger, plan_holds
from elastico_core.state.models import (
    DEFAULT_CONTROLLER,
    Allocation,
    Controller,
    Decision,
    Epoch,
    Event,
    Gpu,
    Job,
    Measurement,
    Price,
    QueueRow,
    utcnow,
)
from elastico_core.state.rows import job_view, knobs_or_none, measurement_view
from elastico_core.state.specs import JobDocument, job_document, split_document
from elastico_core.state.values import (
    TERMINAL_STATUSES,
    DecisionKind,
    DecisionView,
    ExternalIdentity,
    GpuView,
    IdentitySource,
    JobFilter,
    JobStatus,
    JobView,
    MeasurementView,
    PriceView,
    Progress,
    RegisterResult,
)

CHUNK = 500
ENDED_PAGE = 100  # ended jobs per page (status page, ``jobs list``): newest by end time
LIVE_PAGE = 1000  # live jobs ``jobs list`` shows by default (registration order)
_Change = dict[str, Any]


class JobService:
    """Register, read, report on and cancel jobs in the planner state (see the module docstring)."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self._cluster: tuple[str, Cluster] | None = None  # the controller's cluster document, parsed

    @classmethod
    def open(cls, url: str | None = None, *, upgrade: bool = True) -> JobService:
        """Open the state at ``url`` (None: the default SQLite file), migrating it unless ``upgrade=False``."""
        return cls(StateStore.open(url, upgrade=upgrade))

    def close(self) -> None:
        self.store.close()

    # ---- registration -----------------------------------------------------------------------------
    def register(
        self,
        job: Mapping[str, Any],
        identity: ExternalIdentity | None = None,
        *,
        workloads: Sequence[Mapping[str, Any]] = (),
        try_number: int | None = None,
    ) -> RegisterResult:
        """Register one job idempotently by its external identity.

        :param job: one entry of a job YAML's ``jobs:`` list (``workload``, ``floor``, ``weight``, ``work``,
            ``gpus``, ``knobs``, ...). For an Airflow identity its ``id`` may be omitted: the job id is
            derived from the identity (``ExternalIdentity.derived_job_id``), whatever ``id`` says.
        :param identity: ``ExternalIdentity.airflow(...)``; None means a plain submission keyed by ``job["id"]``.
        :param workloads: custom workload definitions (entries of ``workloads:``); only the one used is kept.
        :param try_number: the Airflow try calling (recorded as ``JobView.last_try``; not part of the identity).
        :raises SpecError: the spec is invalid (nothing is stored).
        :raises StateConflict: the identity is registered with a different spec, or the id is taken.
        """
        if identity is not None and identity.source is IdentitySource.AIRFLOW:
            doc = job_document(job, workloads, job_id=identity.derived_job_id(), where=f"task {identity.task_id!r}")
        else:
            doc = job_document(job, workloads, where="job spec")
            if identity is None:
                identity = ExternalIdentity.submission(doc.job_id)
            elif identity.job_id != doc.job_id:
                raise SpecError(f"the identity names job {identity.job_id!r}, the spec {doc.job_id!r}", field="id")
        return self._register_docs([(doc, identity)], try_number)[0]

    def register_many(self, jobs: Sequence[Mapping[str, Any]], *, workloads: Sequence[Mapping[str, Any]] = ()) -> tuple[RegisterResult, ...]:
        """Plain submissions of several jobs in one transaction: all are registered, or (on any error) none."""
        docs = [job_document(j, workloads, where=f"job #{i + 1}") for i, j in enumerate(jobs)]
        return self._register_docs([(d, ExternalIdentity.submission(d.job_id)) for d in docs], None)

    def submit_document(self, text: str, where: str = "jobs") -> tuple[RegisterResult, ...]:
        """Every job of a job YAML document (the format of ``examples/jobs.yaml``), all or none."""
        return self.submit_parsed(split_document(text, where), where)

    def submit_parsed(self, docs: Sequence[JobDocument], where: str | None = None) -> tuple[RegisterResult, ...]:
        """Jobs already validated by ``specs.split_document`` (a caller that checks a file before it opens a
        state, so that a bad file creates nothing), all or none."""
        return self._register_docs([(d, ExternalIdentity.submission(d.job_id)) for d in docs], None, where)

    def queued_cluster(self) -> Cluster | None:
        """The cluster the controller plans against when it has queues (its stored document), else None."""
        text = self.store.read(lambda conn: conn.execute(
            sa.select(Controller.cluster_yaml).where(Controller.name == DEFAULT_CONTROLLER)).scalar_one_or_none())
        if not text:
            return None
        if self._cluster is None or self._cluster[0] != text:
            from elastico_core.specs.files import parse_cluster  # not at import: the facade stays cheap to import

            self._cluster = (text, parse_cluster(text, "the controller's cluster"))
        cluster = self._cluster[1]
        return cluster if cluster.queues else None

    def _check_queues(self, docs: Sequence[JobDocument], where: str | None) -> None:
        """On a cluster with queues, a job names one of them, and its smallest configuration fits the queue's
        nominal quota plus borrowing limit (``pds.quota_admission.queue_problem``): else nothing is registered."""
        cluster = self.queued_cluster()
        if cluster is None:
            return
        from elastico_core.pds.quota_admission import queue_problem, smallest_charges
        from elastico_core.pds.rules import PRODUCTION

        cluster = PRODUCTION.planning_cluster(cluster)  # the GPUs as the planner sees them (less the margin)
        least: dict[tuple[object, ...], dict[str, tuple[float, float]]] = {}
        for d in docs:
            spec = d.spec
            key = (spec.workload, spec.knob_space)
            if key not in least and cluster.queues.get(spec.queue) is not None:
                least[key] = smallest_charges(cluster, spec)
            problem = queue_problem(cluster, spec, least.get(key, {}))
            if problem is not None:
                at = f"{where}: job {spec.id!r}" if where else f"job {spec.id!r}"
                raise SpecError(problem, where=at, field="queue")

    def _register_docs(self, items: Sequence[tuple[JobDocument, ExternalIdentity]], try_number: int | None,
                       where: str | None = None) -> tuple[RegisterResult, ...]:
        self._check_queues([d for d, _ in items], where)
        seen: set[str] = set()
        for doc, _ in items:
            if doc.job_id in seen:
                raise SpecError("duplicate job id in one submission", where=f"job {doc.job_id!r}", field="id")
            seen.add(doc.job_id)

        def tx(conn: Connection) -> tuple[RegisterResult, ...]:
            now = utcnow()
            existing: dict[str, Mapping[Any, Any]] = {}
            taken: set[str] = set()
            for i in range(0, len(items), CHUNK):
                part = items[i : i + CHUNK]
                # one statement, one snapshot: by identity (a re-registration) or by id (an id taken by another
                # identity); a registration racing ours that commits later makes our INSERT fail and retry
                stmt = sa.select(Job.__table__).where(
                    sa.or_(Job.identity_digest.in_([ident.digest for _, ident in part]), Job.id.in_([d.job_id for d, _ in part]))
                )
                for r in conn.execute(stmt).mappings():
                    existing[r["identity_digest"]] = r
                    taken.add(r["id"])
            inserts, events = [], []
            results: list[tuple[str, bool]] = []
            views: dict[str, JobView] = {}
            for doc, ident in items:
                row = existing.get(ident.digest)
                if row is not None:
                    if row["spec_hash"] != doc.digest:
                        raise StateConflict(
                            f"job {row['id']!r} is already registered for this identity with a different spec"
                            " (cancel it, or submit under another id)"
                        )
                    if try_number is not None and row["last_try"] != try_number:
                        conn.execute(
                            sa.update(Job).where(Job.id == row["id"]).values(
                                last_try=try_number, version=Job.version + 1, updated_at=now
                            )
                        )
                        events.append(_event(row["id"], "reattached", None, f"try {try_number}", now))
                        row = {**row, "last_try": try_number, "version": int(row["version"]) + 1, "updated_at": now}
                    views[row["id"]] = job_view(row)
                    results.append((row["id"], False))
                    continue
                if doc.job_id in taken:  # held by another identity
                    raise StateConflict(f"job id {doc.job_id!r} is already taken by another registration")
                inserts.append(_new_row(doc, ident, try_number, now))
                views[doc.job_id] = job_view(inserts[-1])
                events.append(_event(doc.job_id, "registered", None, ident.key.replace("\x1f", "/"), now))
                results.append((doc.job_id, True))
            if inserts:
                conn.execute(sa.insert(Job), inserts)
            if events:
                conn.execute(sa.insert(Event), events)
            return tuple(RegisterResult(views[job_id], created) for job_id, created in results)

        for attempt in range(3):
            try:
                return self.store.write(tx)
            except IntegrityError:
                if attempt == 2:  # pragma: no cover - a third racing insert of the same identity
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    # ---- reads --------------------------------------------------------------------------------
    def get(self, job_id: str) -> JobView:
        """The job as it is now. :raises UnknownJob:"""
        _check_id(job_id)
        views = self.store.read(lambda conn: _views(conn, [job_id]))
        if job_id not in views:
            raise UnknownJob(job_id)
        return views[job_id]

    def get_many(self, job_ids: Iterable[str]) -> dict[str, JobView]:
        """Several jobs at once (unknown ids are simply absent), for a trigger watching many tasks."""
        ids = [j for j in dict.fromkeys(job_ids) if _valid_id(j)]
        return self.store.read(lambda conn: _views(conn, ids))

    def find(self, identity: ExternalIdentity) -> JobView | None:
        """The job an identity registered, if any (what a retried Airflow task reattaches to)."""

        def tx(conn: Connection) -> JobView | None:
            row = conn.execute(sa.select(Job.__table__).where(Job.identity_digest == identity.digest)).mappings().first()
            return job_view(row) if row is not None else None

        return self.store.read(tx)

    def list_jobs(
        self, statuses: Iterable[JobStatus] | None = None, *, limit: int | None = None, offset: int = 0,
        where: JobFilter | None = None,
    ) -> tuple[JobView, ...]:
        """Jobs in registration order, optionally only some statuses and those ``where`` selects (``ended_jobs``
        pages through ended ones)."""

        def tx(conn: Connection) -> tuple[JobView, ...]:
            stmt = _filtered(sa.select(Job.__table__), where).order_by(Job.created_at, Job.id).offset(offset)
            if statuses is not None:
                stmt = stmt.where(Job.status.in_([JobStatus(s).value for s in statuses]))
            if limit is not None:
                stmt = stmt.limit(limit)
            return tuple(job_view(r) for r in conn.execute(stmt).mappings())

        return self.store.read(tx)

    def ended_jobs(
        self, statuses: Iterable[JobStatus] | None = None, *, limit: int = ENDED_PAGE,
        before: tuple[dt.datetime, str] | None = None, where: JobFilter | None = None,
    ) -> tuple[JobView, ...]:
        """Ended jobs, newest by end time first, ``limit`` at most; the next page starts ``before`` the last
        one's ``(finished_at, id)``. One index range scan per status (``ix_elastico_jobs_ended``), so a page
        costs the same with a hundred or a million ended jobs.
        """
        wanted = [JobStatus(s) for s in (statuses or TERMINAL_STATUSES)]
        if any(not s.terminal for s in wanted):
            raise SpecError(f"ended jobs are {', '.join(s.value for s in TERMINAL_STATUSES)}", field="status")

        def tx(conn: Connection) -> tuple[JobView, ...]:
            rows: list[Mapping[Any, Any]] = []
            for status in wanted:
                stmt = sa.select(Job.__table__).where(Job.status == status.value, Job.finished_at.is_not(None))
                stmt = _filtered(stmt, where)
                if before is not None:
                    at, job_id = before
                    stmt = stmt.where(sa.or_(Job.finished_at < at, sa.and_(Job.finished_at == at, Job.id < job_id)))
                stmt = stmt.order_by(Job.finished_at.desc(), Job.id.desc()).limit(limit)
                rows += conn.execute(stmt).mappings().all()
            rows.sort(key=lambda r: (r["finished_at"], r["id"]), reverse=True)
            return tuple(job_view(r) for r in rows[:limit])

        return self.store.read(tx)

    def epoch_notes(self, prefix: str = "") -> tuple[str, ...]:
        """The notes of the last recorded epoch (those starting with ``prefix``): e.g. the profile store's
        quarantined rows, for the status page, which reads only the state."""

        def tx(conn: Connection) -> tuple[str, ...]:
            notes = conn.execute(sa.select(Epoch.notes).order_by(Epoch.epoch.desc()).limit(1)).scalar()
            return tuple(str(n) for n in (notes or ()) if str(n).startswith(prefix))

        return self.store.read(tx)

    def counts(self, where: JobFilter | None = None) -> dict[JobStatus, int]:
        """How many jobs are in each status (of those ``where`` selects)."""

        def tx(conn: Connection) -> dict[JobStatus, int]:
            rows = conn.execute(_filtered(sa.select(Job.status, sa.func.count()), where).group_by(Job.status))
            return {JobStatus(s): int(n) for s, n in rows}

        return self.store.read(tx)

    def gpus(self) -> tuple[GpuView, ...]:
        """The GPU ledger: every GPU the controller has seen, what is reserved on it, and by whom."""

        def tx(conn: Connection) -> tuple[GpuView, ...]:
            holders: dict[str, list[str]] = {}
            for job_id, gpu_id in conn.execute(sa.select(Allocation.job_id, Allocation.gpu_id).order_by(Allocation.job_id)):
                holders.setdefault(gpu_id, []).append(job_id)
            rows = conn.execute(sa.select(Gpu.__table__).order_by(Gpu.node, Gpu.idx)).mappings()
            return tuple(
                GpuView(r["id"], r["node"], r["model"], float(r["capacity_mib"]), float(r["used_mem_mib"]),
                        int(r["max_jobs"]), tuple(holders.get(r["id"], ())), bool(r["present"]))
                for r in rows
            )

        return self.store.read(tx)

    def queues(self) -> tuple[QueueStatus, ...]:
        """Every queue as the last recorded epoch left it (empty on a cluster without queues)."""

        def tx(conn: Connection) -> tuple[QueueStatus, ...]:
            rows = conn.execute(sa.select(QueueRow.status).order_by(QueueRow.name)).scalars()
            return tuple(QueueStatus.from_dict(r) for r in rows)

        return self.store.read(tx)

    def decisions(
        self, *, job_id: str | None = None, limit: int = 100, kinds: Iterable[DecisionKind] | None = None,
        after_id: int | None = None,
    ) -> tuple[DecisionView, ...]:
        """The newest recorded decisions (newest first), all or one job's, optionally only some ``kinds``;
        ``after_id``: only those recorded after that one (``DecisionView.id``: a follower's next page)."""

        def tx(conn: Connection) -> tuple[DecisionView, ...]:
            stmt = sa.select(Decision.__table__).order_by(Decision.id.desc()).limit(limit)
            if job_id is not None:
                stmt = stmt.where(Decision.job_id == job_id)
            if kinds is not None:
                stmt = stmt.where(Decision.kind.in_([DecisionKind(k).value for k in kinds]))
            if after_id is not None:
                stmt = stmt.where(Decision.id > after_id)
            return tuple(
                DecisionView(int(r["epoch"]), r["at"], r["job_id"], DecisionKind(r["kind"]), r["reason"], r["code"],
                             r["token"], knobs_or_none(r["from_knobs"]), knobs_or_none(r["to_knobs"]),
                             tuple(r["from_gpus"] or ()), tuple(r["to_gpus"] or ()), int(r["id"]))
                for r in conn.execute(stmt).mappings()
            )

        return self.store.read(tx)

    def prices(self, *, limit: int = 100) -> tuple[PriceView, ...]:
        """Shadow prices of the newest recorded epochs (oldest first: ready for a chart)."""
        from elastico_core.state.models import Epoch

        def tx(conn: Connection) -> tuple[PriceView, ...]:
            epochs = conn.execute(sa.select(Epoch.epoch, Epoch.recorded_at).order_by(Epoch.epoch.desc()).limit(limit)).all()
            if not epochs:
                return ()
            lo = min(e for e, _ in epochs)
            by_epoch: dict[int, dict[str, float]] = {}
            for e, good, price in conn.execute(sa.select(Price.epoch, Price.good, Price.price).where(Price.epoch >= lo)):
                by_epoch.setdefault(int(e), {})[good] = float(price)
            return tuple(PriceView(int(e), at, Prices.of(by_epoch.get(int(e), {}))) for e, at in sorted(epochs))

        return self.store.read(tx)

    def measurements(
        self, *, job_id: str | None = None, limit: int = 100, after_id: int | None = None
    ) -> tuple[MeasurementView, ...]:
        """Throughput and OOM reports (newest first): predicted against measured, for the status page;
        ``after_id``: only reports newer than that one (a follower's next page)."""

        def tx(conn: Connection) -> tuple[MeasurementView, ...]:
            stmt = sa.select(Measurement.__table__).order_by(Measurement.id.desc()).limit(limit)
            if job_id is not None:
                stmt = stmt.where(Measurement.job_id == job_id)
            if after_id is not None:
                stmt = stmt.where(Measurement.id > after_id)
            return tuple(measurement_view(r) for r in conn.execute(stmt).mappings())

        return self.store.read(tx)

    # ---- reports from launchers ---------------------------------------------------------------
    def report_started(self, job_id: str, token: str) -> JobView:
        """The process of ``token``'s plan is up. For a switching job, the target's token acknowledges the switch.

        Repeating it (a reattached retry) is a no-op. :raises StateConflict: stale token or terminal job.
        """

        def change(conn: Connection, row: RowMapping, now: Any) -> _Change | None:
            status, plan, target = JobStatus(row["status"]), row["plan"], row["target"]
            if status is JobStatus.ADMITTED and _token(plan) == token:
                return {"status": JobStatus.RUNNING.value, "started_at": row["started_at"] or now, "_event": "started"}
            if status is JobStatus.RUNNING and _token(plan) == token:
                return None
            if status is JobStatus.SWITCHING and _token(target) == token:
                return _promote(conn, self.store, row, now)
            if status is JobStatus.SWITCHING and _token(plan) == token:
                return None  # the old configuration restarted; the switch request stands
            raise _stale(row, token)

        return self._transition(job_id, token, change)

    def acknowledge(self, job_id: str, token: str) -> JobView:
        """A switch or migration was honoured: the process now runs the target plan of ``token``.

        Repeating it is a no-op. :raises StateConflict: not the target's token (re-read the job).
        """

        def change(conn: Connection, row: RowMapping, now: Any) -> _Change | None:
            status = JobStatus(row["status"])
            if status is JobStatus.SWITCHING and _token(row["target"]) == token:
                return _promote(conn, self.store, row, now)
            if status is JobStatus.RUNNING and _token(row["plan"]) == token:
                return None
            raise _stale(row, token)

        return self._transition(job_id, token, change)

    def report_throughput(
        self, job_id: str, token: str, throughput: float | None, *, measured_on: str | None = None,
        steps: int | None = None, done: float | None = None, total_steps: int | None = None, items: str = "steps",
    ) -> JobView:
        """A measured throughput (whole job, workload unit) of the running process of ``token``, and how far
        it is: ``steps`` taken and work ``done`` (samples or tokens) since the job first started, of
        ``total_steps`` when the workload knows its total; ``items`` names what ``steps`` counts (``steps``,
        or ``rows`` of an inference shard). ``throughput`` None: progress only (no rate yet).

        :param measured_on: the hardware signature key it was measured on when that is not the plan's GPU
            (a local run on CPU cores): the profile row then lands under that signature, never a GPU's.
        """
        value = None if throughput is None else _positive(throughput, "throughput")
        counts = _progress_counts(steps, done, total_steps)
        if items not in ("steps", "rows"):
            raise SpecError(f"must be 'steps' or 'rows', got {items!r}", field="items")

        def change(conn: Connection, row: RowMapping, now: Any) -> _Change | None:
            plan = _plan_of(row, token)
            if plan is None or not JobStatus(row["status"]).holds_gpus:
                raise _stale(row, token)
            out: _Change = {}
            if value is not None:
                _measure(conn, row, plan, token, "progress", now, throughput=value, measured_on=measured_on)
                out["measured_throughput"] = value
            if counts is not None:
                n, work, total = counts
                out["progress"] = Progress(n, work, total, value, now, items).to_dict()
            return out or None

        return self._transition(job_id, token, change)

    def report_finished(
        self, job_id: str, token: str, throughput: float | None = None, *, peak_mem_mib: float | None = None,
        measured_on: str | None = None,
    ) -> JobView:
        """The job completed its work: its GPUs are released, its measured throughput goes to the profile store.

        :param throughput: measured whole-job throughput in the workload's unit (None if unknown).
        :param peak_mem_mib: measured peak GPU memory per GPU, if the launcher knows it.
        :param measured_on: signature key of the hardware it ran on when not the plan's GPU (see report_throughput).
        """
        value = None if throughput is None else _positive(throughput, "throughput")
        peak = None if peak_mem_mib is None else _positive(peak_mem_mib, "peak_mem_mib")

        def change(conn: Connection, row: RowMapping, now: Any) -> _Change | None:
            status = JobStatus(row["status"])
            if status is JobStatus.FINISHED and _token(row["plan"]) == token:
                return None
            plan = _plan_of(row, token)
            if plan is None or not status.holds_gpus:
                raise _stale(row, token)
            if value is not None:
                _measure(conn, row, plan, token, "final", now, throughput=value, observed=peak, measured_on=measured_on)
            _release(conn, self.store, row["id"])
            return {"status": JobStatus.FINISHED.value, "plan": plan, "target": None, "pending_action": None,
                    "finished_at": now, "measured_throughput": value if value is not None else row["measured_throughput"],
                    "reason": "finished", "_event": "finished"}

        return self._transition(job_id, token, change)

    def report_failed(self, job_id: str, token: str, reason: str) -> JobView:
        """The process failed for another reason than memory: the job ends ``failed`` (``requeue`` retries it)."""
        text = _reason(reason)

        def change(conn: Connection, row: RowMapping, now: Any) -> _Change | None:
            status = JobStatus(row["status"])
            if status is JobStatus.FAILED and _token(row["plan"]) == token:
                return None
            plan = _plan_of(row, token)
            if plan is None or not status.holds_gpus:
                raise _stale(row, token)
            _release(conn, self.store, row["id"])
            return {"status": JobStatus.FAILED.value, "plan": plan, "target": None, "pending_action": None,
                    "finished_at": now, "reason": f"failed: {text}", "_event": "failed", "_detail": text}

        return self._transition(job_id, token, change)

    def report_oom(self, job_id: str, token: str, observed_mem_mib: float | None = None) -> JobView:
        """The process was OOM-killed: GPUs released, back to the queue; the controller then narrows its knob
        space to lower-memory configurations, corrects the profile row, and gives up after repeated kills.

        :param observed_mem_mib: the memory it reached per GPU when killed (pod status, allocator stats), if known.
        """
        observed = None if observed_mem_mib is None else _positive(observed_mem_mib, "observed_mem_mib")

        def change(conn: Connection, row: RowMapping, now: Any) -> _Change | None:
            pending = row["oom_pending"] or {}
            if pending.get("token") == token:
                return None
            plan = _plan_of(row, token)
            if plan is None or not JobStatus(row["status"]).holds_gpus:
                raise _stale(row, token)
            gpu = _gpu_info(conn, plan)
            _measure(conn, row, plan, token, "oom", now, observed=observed)
            _release(conn, self.store, row["id"])
            info = {"token": token, "knobs": plan["knobs"], "gpu_model": gpu[0], "budget_mib": float(plan["memory_mib"]),
                    "observed_mem_mib": observed}
            return {"status": JobStatus.PENDING.value, "plan": None, "target": None, "pending_action": None,
                    "oom_kills": int(row["oom_kills"]) + 1, "oom_pending": info, "queue_code": None, "shortfall": None,
                    "reason": f"OOM-killed at {Knobs.of(plan['knobs']).short()} on {','.join(plan['gpus'])}: re-planning at lower memory",
                    "_event": "oom"}

        return self._transition(job_id, token, change)

    def cancel(self, job_id: str, reason: str = "cancelled") -> JobView:
        """Stop a job whatever it does (its launcher must kill the process); a terminal job is left as it is."""
        text = _reason(reason)

        def change(conn: Connection, row: RowMapping, now: Any) -> _Change | None:
            if JobStatus(row["status"]).terminal:
                return None
            _release(conn, self.store, row["id"])
            return {"status": JobStatus.CANCELLED.value, "target": None, "pending_action": None,
                    "finished_at": now, "reason": text, "_event": "cancelled", "_detail": text}

        return self._transition(job_id, None, change)

    def requeue(self, job_id: str, reason: str = "requeued") -> JobView:
        """A failed or cancelled job waits again (a cleared or retried Airflow task); knob limits are kept."""
        text = _reason(reason)

        def change(conn: Connection, row: RowMapping, now: Any) -> _Change | None:
            status = JobStatus(row["status"])
            if status is JobStatus.PENDING:
                return None
            if status not in (JobStatus.FAILED, JobStatus.CANCELLED):
                raise StateConflict(f"job {row['id']!r} is {status.value}; only failed or cancelled jobs can be requeued")
            return {"status": JobStatus.PENDING.value, "plan": None, "target": None, "pending_action": None,
                    "finished_at": None, "queue_code": None, "shortfall": None, "reason": text, "_event": "requeued"}

        return self._transition(job_id, None, change)

    def _transition(
        self, job_id: str, token: str | None, change: Callable[[Connection, RowMapping, Any], _Change | None]
    ) -> JobView:
        """Lock the job row, let ``change`` decide, write it with a version check (optimistic concurrency)."""

        _check_id(job_id)
        if token is not None and not _valid_id(token):
            raise StateConflict(f"token {token!r} is not a token this state issued")

        def tx(conn: Connection) -> JobView:
            row = conn.execute(self.store.for_update(sa.select(Job.__table__).where(Job.id == job_id))).mappings().first()
            if row is None:
                raise UnknownJob(job_id)
            now = utcnow()
            values = change(conn, row, now)
            if values is None:
                return job_view(row)
            event = values.pop("_event", None)
            detail = values.pop("_detail", "")
            values.update(version=int(row["version"]) + 1, updated_at=now)
            done = conn.execute(sa.update(Job).where(Job.id == job_id, Job.version == row["version"]).values(**values))
            if done.rowcount != 1:  # pragma: no cover - the row lock makes this unreachable on both backends
                raise StateConflict(f"job {job_id!r} changed concurrently; re-read it")
            if event:
                conn.execute(sa.insert(Event), [_event(job_id, event, token, detail, now)])
            return _views(conn, [job_id])[job_id]

        return self.store.write(tx)


# ---- helpers ------------------------------------------------------------------------------------
def _filtered(stmt: Any, where: JobFilter | None) -> Any:
    """``stmt`` restricted to the jobs ``where`` selects (each given field must match exactly)."""
    if where is None:
        return stmt
    if where.user:
        stmt = stmt.where(Job.owner == where.user)
    if where.dag:
        stmt = stmt.where(Job.dag_id == where.dag)
    if where.queue:
        stmt = stmt.where(Job.queue == where.queue)
    if where.job:
        stmt = stmt.where(Job.id == where.job)
    return stmt


def _views(conn: Connection, job_ids: Sequence[str]) -> dict[str, JobView]:
    out: dict[str, JobView] = {}
    for i in range(0, len(job_ids), CHUNK):
        for r in conn.execute(sa.select(Job.__table__).where(Job.id.in_(job_ids[i : i + CHUNK]))).mappings():
            out[r["id"]] = job_view(r)
    return out


def _new_row(doc: JobDocument, ident: ExternalIdentity, try_number: int | None, now: Any) -> dict[str, Any]:
    spec = doc.spec
    return {
        "id": doc.job_id,
        "identity_digest": ident.digest,
        "source": ident.source.value,
        "dag_id": ident.dag_id or None,
        "run_id": ident.run_id or None,
        "task_id": ident.task_id or None,
        "map_index": ident.map_index if ident.source is IdentitySource.AIRFLOW else None,
        "last_try": try_number,
        "workload": spec.workload.name,
        "kind": spec.kind.value,
        "owner": spec.user[:128],
        "queue": spec.queue,
        "priority": spec.priority,
        "spec": dict(doc.doc),
        "spec_hash": doc.digest,
        "status": JobStatus.PENDING.value,
        "plan": None,
        "target": None,
        "pending_action": None,
        "plan_seq": 0,
        "attempts": 0,
        "oom_kills": 0,
        "knob_limits": None,
        "oom_pending": None,
        "reason": "registered",
        "queue_code": None,
        "shortfall": None,
        "measured_throughput": None,
        "progress": None,
        "created_at": now,
        "queued_at": now,
        "updated_at": now,
        "admitted_at": None,
        "started_at": None,
        "finished_at": None,
        "version": 1,
    }


def _event(job_id: str, kind: str, token: str | None, detail: str, now: Any) -> dict[str, Any]:
    return {"job_id": job_id, "kind": kind, "token": token, "detail": detail[:2000], "at": now}


def _token(plan: Mapping[str, Any] | None) -> str | None:
    return str(plan["token"]) if plan else None


def _plan_of(row: RowMapping, token: str) -> Mapping[str, Any] | None:
    """The plan (current or switch target) that ``token`` names, if it is one of the job's live plans."""
    for plan in (row["plan"], row["target"]):
        if plan and plan.get("token") == token:
            return plan  # type: ignore[no-any-return]
    return None


def _stale(row: RowMapping, token: str) -> StateConflict:
    return StateConflict(
        f"job {row['id']!r} is {row['status']} (token {_token(row['target']) or _token(row['plan'])}); "
        f"token {token!r} is not current: re-read the job"
    )


def _promote(conn: Connection, store: StateStore, row: RowMapping, now: Any) -> _Change:
    """A switching job now runs its target: the target becomes the plan, the ledger drops the old reservation."""
    target = row["target"]
    ledger = Ledger(conn, store)
    ledger.load([row["id"]], target["gpus"])
    ledger.apply(row["id"], plan_holds(target))  # shrinking to a subset of what it holds: always fits
    ledger.flush(int(target["epoch"]))
    return {"status": JobStatus.RUNNING.value, "plan": target, "target": None, "pending_action": None,
            "started_at": row["started_at"] or now, "_event": "switched"}


def _release(conn: Connection, store: StateStore, job_id: str) -> None:
    ledger = Ledger(conn, store)
    ledger.load([job_id])
    ledger.apply(job_id, {})
    ledger.flush(0)


def _gpu_info(conn: Connection, plan: Mapping[str, Any]) -> tuple[str, str]:
    row = conn.execute(sa.select(Gpu.model, Gpu.signature).where(Gpu.id == plan["gpus"][0])).first()
    return (str(row[0]), str(row[1])) if row is not None else ("", "")


def _measure(
    conn: Connection,
    row: RowMapping,
    plan: Mapping[str, Any],
    token: str,
    kind: str,
    now: Any,
    *,
    throughput: float | None = None,
    observed: float | None = None,
    measured_on: str | None = None,
) -> None:
    model, signature = _gpu_info(conn, plan)
    signature = measured_on or signature
    conn.execute(
        sa.insert(Measurement),
        [{
            "job_id": row["id"], "token": token, "kind": kind, "workload": row["workload"], "knobs": plan["knobs"],
            "gpu_model": model, "signature": signature, "gpu_id": plan["gpus"][0], "throughput": throughput,
            "predicted_throughput": float(plan["throughput"]), "predicted_slowdown": float(plan["predicted_slowdown"]),
            "colocated": bool(plan.get("partners")), "budget_mib": float(plan["memory_mib"]),
            "observed_mem_mib": observed, "at": now, "fed": False, "fed_note": "",
        }],
    )


def _progress_counts(steps: int | None, done: float | None, total: int | None) -> tuple[int, float, int | None] | None:
    """Checked progress figures (None: none reported); a value out of range is the launcher's error."""
    if steps is None and done is None:
        return None
    n = 0 if steps is None else steps
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < 2**53:
        raise SpecError(f"must be an integer >= 0, got {steps!r}", field="steps")
    work = 0.0 if done is None else done
    if isinstance(work, bool) or not isinstance(work, (int, float)) or not math.isfinite(work) or not 0 <= work < 1e18:
        raise SpecError(f"must be a finite number >= 0, got {done!r}", field="done")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or not 0 < total < 2**53):
        raise SpecError(f"must be an integer > 0, got {total!r}", field="total_steps")
    return n, float(work), total


def _positive(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SpecError(f"must be a finite number > 0, got {value!r}", field=name)
    return float(value)


def _reason(text: str) -> str:
    if not isinstance(text, str):
        raise SpecError(f"a reason is text, got {type(text).__name__}", field="reason")
    return text.replace("\x00", "").strip()[:2000] or "no reason given"


def _valid_id(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 300 and "\x00" not in value


def _check_id(job_id: object) -> None:
    if not _valid_id(job_id):
        raise UnknownJob(str(job_id)[:300].replace("\x00", "\\0"))
