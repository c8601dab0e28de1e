"""What one epoch plans from: a consistent read of the active jobs and a bounded window of the queue.

Why a window: the queue may hold far more jobs than one epoch can place (10,000 waiting on 4,096 GPUs);
planning all of them every 5 s costs seconds and memory for no benefit, because only the head of the
queue can start soon. The controller plans every admitted/running/switching job plus the first
``max_pending`` pending jobs in queue order (priority desc, queue time, id) — the order the
planner itself uses — so memory and latency are bounded by what the cluster can hold, not by the queue.
The queue time is ``queued_at``: registration, or the last release by the start deadline (``deadline``).
Specs are fetched only for jobs whose ``spec_hash`` the controller has not built yet.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from elastico_core.model.knobs import Knobs
from elastico_core.model.plan import Prices
from elastico_core.model.state import Assignment
from elastico_core.state.db import StateStore
from elastico_core.state.models import DEFAULT_CONTROLLER, Controller, Epoch, Job, Measurement
from elastico_core.state.values import ACTIVE_STATUSES, JobStatus

CHUNK = 500


@dataclass(frozen=True, slots=True)
class JobRow:
    """The columns of one job the controller plans and records with."""

    id: str
    version: int
    status: JobStatus
    spec_hash: str
    knob_limits: Mapping[str, Any] | None
    queue_code: str | None
    reason: str
    priority: int
    queued_at: dt.datetime  # registration, or the last release by the start deadline
    oom_pending: Mapping[str, Any] | None
    oom_kills: int
    assignment: Assignment | None = None  # what the planner must treat as running (the target while switching)


def assignment_of(job_id: str, status: JobStatus, plan: Mapping[str, Any] | None, target: Mapping[str, Any] | None) -> Assignment | None:
    chosen = target if status is JobStatus.SWITCHING and target else plan
    if not chosen or not status.holds_gpus:
        return None
    return Assignment(job_id, Knobs.of(chosen["knobs"]), tuple(chosen["gpus"]))


# job id -> (version, assignment): plans are large JSON documents; read one again only when its row changed
AssignmentCache = dict[str, tuple[int, Assignment | None]]


@dataclass(frozen=True, slots=True)
class Snapshot:
    rows: Mapping[str, JobRow]  # active jobs first, then the pending window in queue order
    pending_total: int
    epoch: int  # last recorded epoch
    prices: Prices | None
    fingerprint: tuple[int, ...] = ()  # changes whenever any job or report changes (see ``fingerprint``)

    @property
    def active(self) -> tuple[str, ...]:
        return tuple(j for j, r in self.rows.items() if r.status.holds_gpus)

    @property
    def pending(self) -> tuple[str, ...]:
        return tuple(j for j, r in self.rows.items() if r.status is JobStatus.PENDING)


_COLUMNS = (
    Job.id, Job.version, Job.status, Job.spec_hash, Job.knob_limits, Job.queue_code,
    Job.reason, Job.priority, Job.queued_at, Job.oom_pending, Job.oom_kills,
)


def _row(r: Any) -> JobRow:
    return JobRow(r[0], int(r[1]), JobStatus(r[2]), r[3], r[4], r[5], r[6] or "", int(r[7]), r[8], r[9], int(r[10]))


def load_snapshot(
    store: StateStore, max_pending: int, name: str = DEFAULT_CONTROLLER, cache: AssignmentCache | None = None
) -> Snapshot:
    """One consistent read; ``cache`` (kept by the caller across epochs) saves re-reading unchanged plans."""
    cache = {} if cache is None else cache

    def tx(conn: Connection) -> Snapshot:
        rows: dict[str, JobRow] = {}
        active = conn.execute(
            sa.select(*_COLUMNS).where(Job.status.in_([s.value for s in ACTIVE_STATUSES])).order_by(Job.id)
        )
        for r in active:
            rows[r[0]] = _row(r)
        stale = [j for j, row in rows.items() if cache.get(j, (-1, None))[0] != row.version]
        for i in range(0, len(stale), CHUNK):
            part = stale[i : i + CHUNK]
            for job_id, status, plan, target in conn.execute(
                sa.select(Job.id, Job.status, Job.plan, Job.target).where(Job.id.in_(part))
            ):
                cache[job_id] = (rows[job_id].version, assignment_of(job_id, JobStatus(status), plan, target))
        for gone in set(cache) - set(rows):
            del cache[gone]
        for job_id, row in rows.items():
            rows[job_id] = replace(row, assignment=cache[job_id][1])
        pending = conn.execute(
            sa.select(*_COLUMNS)
            .where(Job.status == JobStatus.PENDING.value)
            .order_by(Job.priority.desc(), Job.queued_at, Job.id)
            .limit(max_pending)
        )
        for r in pending:
            rows[r[0]] = _row(r)
        total = conn.execute(sa.select(sa.func.count()).where(Job.status == JobStatus.PENDING.value)).scalar_one()
        lease = conn.execute(sa.select(Controller.epoch, Controller.prices).where(Controller.name == name)).one()
        prices = Prices.of({str(k): float(v) for k, v in lease[1].items()}) if lease[1] else None
        last = conn.execute(sa.select(sa.func.coalesce(sa.func.max(Epoch.epoch), 0))).scalar_one()
        return Snapshot(rows, int(total), max(int(last), int(lease[0])), prices, _fingerprint(conn))

    return store.read(tx)


def _fingerprint(conn: Connection) -> tuple[int, ...]:
    """Jobs, the sum of their versions (every write bumps one), the newest report and epoch: equal
    fingerprints mean nothing the planner reads has changed."""
    jobs, versions = conn.execute(sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(Job.version), 0))).one()
    report = conn.execute(sa.select(sa.func.coalesce(sa.func.max(Measurement.id), 0))).scalar_one()
    epoch = conn.execute(sa.select(sa.func.coalesce(sa.func.max(Epoch.epoch), 0))).scalar_one()
    return (int(jobs), int(versions), int(report), int(epoch))


def fingerprint(store: StateStore) -> tuple[int, ...]:
    return store.read(_fingerprint)


def load_specs(store: StateStore, job_ids: Iterable[str]) -> dict[str, Mapping[str, Any]]:
    """Stored job documents of ``job_ids`` (fetched in chunks)."""
    ids = sorted(set(job_ids))

    def tx(conn: Connection) -> dict[str, Mapping[str, Any]]:
        out: dict[str, Mapping[str, Any]] = {}
        for i in range(0, len(ids), CHUNK):
            for job_id, spec in conn.execute(sa.select(Job.id, Job.spec).where(Job.id.in_(ids[i : i + CHUNK]))):
                out[job_id] = spec
        return out

    return store.read(tx) if ids else {}
