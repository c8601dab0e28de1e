"""The start deadline: an admitted job that nobody starts gives its GPUs back (Kueue's ``waitForPodsReady``).

Admission reserves GPU memory in the ledger until the launcher reports the process started. A launcher
that never does — its Airflow task was removed, its pod cannot be scheduled, its worker died before the
launch — would otherwise hold that reservation forever, and every job behind it waits. The controller
therefore releases an ``admitted`` job whose admission is older than the deadline: the reservation is
dropped, the job goes back to the queue with a reason (its plan and token are withdrawn, so a launcher
that wakes up late gets a stale-token answer instead of running on GPUs given to someone else), and
the release is recorded as an event and counted in the epoch report. A job the planner asked to switch
before it ever started (status ``switching``, never reported started) is released the same way: the
switch request sheltered it, holding the larger of two reservations, for as long as the request stood.

Fairness: the released job re-enters the queue at the time of its release (``queued_at``), behind every
job that waited while it held the reservation — Kueue's ``requeuingStrategy`` with the eviction
timestamp. Kept at its registration time it was the head of the queue again and got the same GPUs back
in the same epoch, for ever, while the job behind it starved.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from elastico_core.state.db import StateStore
from elastico_core.state.ledger import Ledger
from elastico_core.state.models import Event, Job, utcnow
from elastico_core.state.values import JobStatus

QUEUE_CODE = "start_deadline"
EVENT = "start-deadline"


@dataclass(frozen=True, slots=True)
class Released:
    """One job given back to the queue, and how long it had waited to start."""

    job_id: str
    waited_s: float


def release_unstarted(store: StateStore, deadline_s: float, *, now: dt.datetime | None = None) -> tuple[Released, ...]:
    """Re-queue every admitted job not reported started within ``deadline_s`` of its admission."""
    if deadline_s <= 0:
        return ()
    at = now or utcnow()
    cutoff = at - dt.timedelta(seconds=deadline_s)
    # admitted, or asked to switch before it ever started (a switch request must not shelter it)
    unstarted = sa.or_(Job.status == JobStatus.ADMITTED.value,
                       sa.and_(Job.status == JobStatus.SWITCHING.value, Job.started_at.is_(None)))
    late = sa.and_(unstarted, Job.admitted_at < cutoff)
    if not store.read(lambda conn: conn.execute(sa.select(Job.id).where(late).limit(1)).first()):
        return ()  # the usual case: a read, no write lock taken

    def tx(conn: Connection) -> tuple[Released, ...]:
        rows = conn.execute(
            store.for_update(
                sa.select(Job.id, Job.version, Job.admitted_at, Job.plan).where(late)
                .order_by(Job.id)
            )
        ).all()
        if not rows:
            return ()
        ledger = Ledger(conn, store)
        ledger.load([r.id for r in rows])
        out = []
        for r in rows:
            waited = (at - r.admitted_at).total_seconds()
            reason = (
                f"released after {waited:.0f} s admitted but never started (start deadline {deadline_s:g} s); "
                "re-queued"
            )
            ledger.apply(r.id, {})
            conn.execute(
                sa.update(Job)
                .where(Job.id == r.id, Job.version == r.version)
                .values(status=JobStatus.PENDING.value, plan=None, target=None, pending_action=None,
                        queue_code=QUEUE_CODE, reason=reason, version=r.version + 1, updated_at=at, queued_at=at)
            )
            token = str((r.plan or {}).get("token") or "") or None
            conn.execute(sa.insert(Event), [{"job_id": r.id, "kind": EVENT, "token": token, "detail": reason, "at": at}])
            out.append(Released(r.id, waited))
        ledger.flush(0)
        return tuple(out)

    return store.write(tx)
