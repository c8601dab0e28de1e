"""Recording one epoch: every decision, the GPU ledger, prices and the epoch number in ONE transaction.

Crash safety follows from three facts:

1. **Plan on a committed snapshot, commit all or nothing.** The plan is computed from a snapshot; its
   admissions, switch requests, preemptions, holds (with reasons), prices, ledger changes and the new
   epoch number are written in a single transaction. A controller killed before the commit leaves no
   trace; the next one (or the restarted one) reads the same state and plans again.
2. **Launchers act only on committed plans, by token.** A token is ``<job id>:<plan_seq>`` and the
   decisions table holds it under a UNIQUE constraint: the same admission cannot be recorded twice,
   even by two controllers racing from the same snapshot. A launcher starts a process only for the token
   it read from a committed job row, and reports with it; repeating a report is a no-op.
3. **Validate at commit.** The transaction locks the lease row (fencing token must still be ours), then
   the rows of the jobs it changes (their version must equal the snapshot's: a job cancelled or finished
   meanwhile is skipped), then the GPU rows (``Ledger``). A change the ledger cannot fit — memory not yet
   released by a switching or finishing job — is recorded as ``defer`` and re-planned next epoch.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from elastico_core.model.cluster import Cluster
from elastico_core.model.errors import ElasticoError
from elastico_core.model.job import JobSpec
from elastico_core.model.knobs import Knobs, KnobValue
from elastico_core.model.plan import ActionKind, Placement, Plan, QueueCode, Queued
from elastico_core.pds.budgets import launch_settings
from elastico_core.state.db import StateStore
from elastico_core.state.lease import Lease, renew_in, verify
from elastico_core.state.ledger import Hold, Ledger, merged_holds, plan_holds
from elastico_core.state.models import Decision, Epoch, Job, Price, QueueRow, utcnow
from elastico_core.state.snapshot import Snapshot
from elastico_core.state.values import DecisionKind, JobStatus, PlanView

CHUNK = 500
# Prices are recorded when some price moves by more than this (absolute + relative): tâtonnement keeps
# nudging warm-started prices by tiny amounts, which would otherwise record an epoch every ΔT forever.
PRICE_ABS_EPS = 1e-4
PRICE_REL_EPS = 1e-3


class Stage(StrEnum):
    """Points of an epoch a test hook may stop at (``Controller(hook=...)``)."""

    PLANNED = "planned"  # decided, nothing recorded yet
    RECORDING = "recording"  # inside the recording transaction, rows written, not committed
    RECORDED = "recorded"  # committed


@dataclass(frozen=True, slots=True)
class JobChange:
    """A decision taken before planning (it shaped the planner's input), recorded with the epoch."""

    job_id: str
    kind: DecisionKind  # NARROW or FAIL
    reason: str
    limits: Mapping[str, list[KnobValue]] | None = None
    from_knobs: Knobs | None = None


@dataclass(frozen=True, slots=True)
class EpochInput:
    snapshot: Snapshot
    plan: Plan
    specs: Mapping[str, JobSpec]
    cluster: Cluster
    changes: Sequence[JobChange] = ()
    started_at: dt.datetime = field(default_factory=utcnow)
    plan_ms: float = 0.0
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RecordResult:
    recorded: bool
    epoch: int
    lease: Lease
    counts: Mapping[str, int] = field(default_factory=dict)


def read_owed(conn: Connection) -> dict[str, int]:
    """The epochs each job has been owed its queue's lent quota, as the last recorded epoch left them."""
    out: dict[str, int] = {}
    for status in conn.execute(sa.select(QueueRow.status)).scalars():
        owed = status.get("owed") if isinstance(status, Mapping) else None
        if isinstance(owed, Mapping):
            out.update({str(j): n for j, n in owed.items() if isinstance(n, int) and not isinstance(n, bool) and n > 0})
    return out


def record_epoch(
    store: StateStore,
    lease: Lease,
    ttl_s: float,
    inp: EpochInput,
    hook: Callable[[Stage], None] | None = None,
) -> RecordResult:
    """Write ``inp`` as the next epoch (or only renew the lease when nothing changed). :raises LeaseLost:"""
    return store.write(lambda conn: _Recorder(conn, store, lease, ttl_s, inp, hook).run())


class _Recorder:
    def __init__(self, conn: Connection, store: StateStore, lease: Lease, ttl_s: float, inp: EpochInput,
                 hook: Callable[[Stage], None] | None) -> None:
        self.conn, self.store, self.lease, self.ttl_s, self.inp, self.hook = conn, store, lease, ttl_s, inp, hook
        self.now = utcnow()
        self.updates: dict[str, dict[str, Any]] = {}
        self.decisions: list[dict[str, Any]] = []
        self.counts = dict.fromkeys(("admitted", "switched", "migrated", "preempted", "deferred", "held", "failed", "narrowed"), 0)
        self.node_of = {g.id: g.node for g in inp.cluster.gpus}
        self.present = set(self.node_of)
        self._node_clusters: dict[str, Cluster] = {}
        self.placements = {p.job_id: p for p in inp.plan.placements}

    # ------------------------------------------------------------------------------------------
    def run(self) -> RecordResult:
        state = verify(self.conn, self.store, self.lease)
        # Epoch numbers are global (not per lease row): its primary key makes two controllers that both
        # believe they lead (a split brain) collide on the same number, and the second one rolls back.
        last = self.conn.execute(sa.select(sa.func.coalesce(sa.func.max(Epoch.epoch), 0))).scalar_one()
        self.epoch = max(int(last), state.epoch) + 1
        plan, snap = self.inp.plan, self.inp.snapshot
        queued = {q.job_id: q for q in plan.queued}
        moves = [a for a in plan.actions if a.kind in (ActionKind.ADMIT, ActionKind.SWITCH, ActionKind.MIGRATE, ActionKind.PREEMPT)]
        holds = []
        for a in plan.actions:
            q = queued.get(a.job_id)
            row = snap.rows.get(a.job_id)
            if a.kind is ActionKind.HOLD and q is not None and row is not None and (row.queue_code, row.reason) != (q.code.value, q.reason):
                holds.append(a)
        touched = sorted({a.job_id for a in moves} | {a.job_id for a in holds} | {c.job_id for c in self.inp.changes})
        prices = plan.prices.as_dict()
        if not touched and _same_prices(state.prices, prices):
            self.lease = renew_in(self.conn, self.lease, self.ttl_s)
            return RecordResult(False, self.epoch - 1, self.lease, self.counts)

        self.locked = self._lock_jobs(touched)
        ledger_jobs = [a.job_id for a in moves if self._fresh(a.job_id)]
        ledger_jobs += [c.job_id for c in self.inp.changes if c.kind is DecisionKind.FAIL and self._fresh(c.job_id)]
        to_gpus = {g for a in moves for g in a.to_gpus}
        self.ledger = Ledger(self.conn, self.store)
        self.ledger.load(ledger_jobs, to_gpus)

        for change in self.inp.changes:
            self._change(change)
        for a in moves:
            if a.kind is ActionKind.PREEMPT:
                q = queued.get(a.job_id)
                self._preempt(a.job_id, a.reason, _shortfall(q), q.code.value if q is not None else QueueCode.PREEMPTED.value)
        for a in moves:
            if a.kind in (ActionKind.SWITCH, ActionKind.MIGRATE):
                self._switch(a.job_id, DecisionKind(a.kind.value), a.reason)
        for a in moves:
            if a.kind is ActionKind.ADMIT:
                self._admit(a.job_id, a.reason)
        for a in holds:
            q = queued[a.job_id]
            if self._fresh(a.job_id) and self.locked[a.job_id].status == JobStatus.PENDING.value:
                self._update(a.job_id, reason=q.reason, queue_code=q.code.value, shortfall=_shortfall(q))
                self._decide(a.job_id, DecisionKind.HOLD, a.reason, code=q.code.value)
                self.counts["held"] += 1

        if not self.decisions and not self.updates and _same_prices(state.prices, prices):
            self.lease = renew_in(self.conn, self.lease, self.ttl_s)  # everything was already said: no epoch
            return RecordResult(False, self.epoch - 1, self.lease, self.counts)
        self._write_epoch(prices)  # first: a concurrent recorder of the same number fails here, before any other write
        self._write_updates()
        self._write_queues()
        self.ledger.flush(self.epoch)
        if self.hook is not None:
            self.hook(Stage.RECORDING)
        if self.decisions:
            self.conn.execute(sa.insert(Decision), self.decisions)
        self.lease = renew_in(self.conn, self.lease, self.ttl_s, epoch=self.epoch, prices=prices)
        return RecordResult(True, self.epoch, self.lease, self.counts)

    # ---- reading -------------------------------------------------------------------------------
    def _lock_jobs(self, ids: Sequence[str]) -> dict[str, Row[Any]]:
        out: dict[str, Row[Any]] = {}
        for i in range(0, len(ids), CHUNK):
            stmt = self.store.for_update(
                sa.select(Job.id, Job.version, Job.status, Job.plan, Job.target, Job.plan_seq, Job.attempts,
                          Job.started_at, Job.knob_limits)
                .where(Job.id.in_(ids[i : i + CHUNK]))
                .order_by(Job.id)
            )
            for r in self.conn.execute(stmt):
                out[r.id] = r
        return out

    def _fresh(self, job_id: str) -> bool:
        """The job is as the planner saw it (nobody reported, cancelled or re-registered it meanwhile)."""
        row, seen = self.locked.get(job_id), self.inp.snapshot.rows.get(job_id)
        return row is not None and seen is not None and int(row.version) == seen.version

    def _stale(self, job_id: str, what: str) -> None:
        row = self.locked.get(job_id)
        if row is None or JobStatus(row.status).terminal:
            return  # finished or cancelled meanwhile: nothing to say
        self._decide(job_id, DecisionKind.DEFER, f"{what} deferred: the job changed while the epoch was planned")
        self.counts["deferred"] += 1

    # ---- the decisions -------------------------------------------------------------------------
    def _change(self, c: JobChange) -> None:
        if not self._fresh(c.job_id) or self.locked[c.job_id].status != JobStatus.PENDING.value:
            return
        if c.kind is DecisionKind.NARROW:
            self._update(c.job_id, knob_limits=dict(c.limits or {}), oom_pending=None, reason=c.reason)
            self.counts["narrowed"] += 1
        else:
            self.ledger.apply(c.job_id, {})
            self._update(c.job_id, status=JobStatus.FAILED.value, oom_pending=None, reason=c.reason, finished_at=self.now,
                         plan=None, target=None, pending_action=None, queue_code=None, shortfall=None)
            self.counts["failed"] += 1
        self._decide(c.job_id, c.kind, c.reason, from_knobs=c.from_knobs)

    def _preempt(self, job_id: str, reason: str, shortfall: dict[str, object] | None = None, code: str = "preempted") -> None:
        row = self.locked.get(job_id)
        if not self._fresh(job_id) or row is None or not JobStatus(row.status).holds_gpus:
            return self._stale(job_id, "preemption")
        held = set((row.plan or {}).get("gpus", ())) | set((row.target or {}).get("gpus", ()))
        if held and held <= self.present and code not in (QueueCode.RECLAIMED.value, QueueCode.OUTBID.value):
            # The plan contract (model.plan.ActionKind.PREEMPT): only a job whose GPUs are gone is preempted,
            # one whose queue's lent quota is reclaimed (``pds/quotas.py``), or one that waiting jobs outbid
            # (``PlannerConfig.preempt_outbid``): the last two checkpoint and wait again.
            # Killing a healthy process for a plan that says otherwise is never worth it: keep it.
            return self._defer(job_id, "preemption", "its GPUs are all still in the cluster; it keeps running")
        self.ledger.apply(job_id, {})
        old = row.plan or {}
        self._update(job_id, status=JobStatus.PENDING.value, plan=None, target=None, pending_action=None,
                     queue_code=code, reason=reason, shortfall=shortfall)
        self._decide(job_id, DecisionKind.PREEMPT, reason, code=code,
                     from_knobs=Knobs.of(old["knobs"]) if old else None, from_gpus=tuple(old.get("gpus", ())))
        self.counts["preempted"] += 1

    def _switch(self, job_id: str, kind: DecisionKind, reason: str) -> None:
        row, p = self.locked.get(job_id), self.placements.get(job_id)
        if p is None or row is None or not self._fresh(job_id) or not JobStatus(row.status).holds_gpus:
            return self._stale(job_id, kind.value)
        current = row.plan
        if current and Knobs.of(current["knobs"]) == p.knobs and tuple(current["gpus"]) == p.gpus:
            # the plan returns a switching job to what it runs now: withdraw the request
            self.ledger.apply(job_id, plan_holds(current))
            status = JobStatus.RUNNING if row.started_at is not None else JobStatus.ADMITTED
            self._update(job_id, status=status.value, target=None, pending_action=None, reason=f"switch withdrawn: {reason}")
            self._decide(job_id, kind, f"switch withdrawn: {reason}", from_knobs=p.knobs, to_knobs=p.knobs,
                         from_gpus=p.gpus, to_gpus=p.gpus)
            return
        seq = int(row.plan_seq) + 1
        token = f"{job_id}:{seq}"
        target = self._plan_dict(p, token)
        if target is None:
            return self._defer(job_id, kind.value, "its launch settings could not be built")
        new = merged_holds(plan_holds(current), _holds(p))
        why = self.ledger.check(job_id, new)
        if why is not None:
            return self._defer(job_id, kind.value, why)
        self.ledger.apply(job_id, new)
        self._update(job_id, status=JobStatus.SWITCHING.value, target=target, pending_action=kind.value,
                     plan_seq=seq, reason=reason, queue_code=None, shortfall=None)
        self._decide(job_id, kind, reason, token=token,
                     from_knobs=Knobs.of(current["knobs"]) if current else None, to_knobs=p.knobs,
                     from_gpus=tuple(current["gpus"]) if current else (), to_gpus=p.gpus)
        self.counts["switched" if kind is DecisionKind.SWITCH else "migrated"] += 1

    def _admit(self, job_id: str, reason: str) -> None:
        row, p = self.locked.get(job_id), self.placements.get(job_id)
        if p is None or row is None or not self._fresh(job_id) or row.status != JobStatus.PENDING.value:
            return self._stale(job_id, "admission")
        seq = int(row.plan_seq) + 1
        token = f"{job_id}:{seq}"
        plan = self._plan_dict(p, token)
        if plan is None:
            return self._defer(job_id, "admission", "its launch settings could not be built")
        new = _holds(p)
        why = self.ledger.check(job_id, new)
        if why is not None:
            return self._defer(job_id, "admission", why)
        self.ledger.apply(job_id, new)
        self._update(job_id, status=JobStatus.ADMITTED.value, plan=plan, target=None, pending_action=None,
                     plan_seq=seq, attempts=int(row.attempts) + 1, admitted_at=self.now, reason=reason, queue_code=None, shortfall=None)
        self._decide(job_id, DecisionKind.ADMIT, reason, token=token, to_knobs=p.knobs, to_gpus=p.gpus)
        self.counts["admitted"] += 1

    def _defer(self, job_id: str, what: str, why: str) -> None:
        text = f"{what} deferred: {why}"
        self.counts["deferred"] += 1
        seen = self.inp.snapshot.rows.get(job_id)
        if seen is not None and seen.reason == text:
            return  # said last epoch already; the same plan keeps meeting the same refusal
        self._update(job_id, reason=text, **({"queue_code": "deferred"} if what == "admission" else {}))
        self._decide(job_id, DecisionKind.DEFER, text, code="deferred")

    def _plan_dict(self, p: Placement, token: str) -> dict[str, Any] | None:
        spec = self.inp.specs.get(p.job_id)
        if spec is None:
            return None
        partners = self._partners_on_busiest_gpu(p)
        try:
            launch = launch_settings(p, spec.workload, self._node_cluster(p.gpus[0]), partners)
        except ElasticoError:
            return None
        nodes = tuple(dict.fromkeys(self.node_of.get(g, g.rsplit("/", 1)[0]) for g in p.gpus))
        view = PlanView(
            token=token, epoch=self.epoch, knobs=p.knobs, gpus=p.gpus, nodes=nodes, memory_mib=p.resources.gpu_mem_mib,
            sm=p.resources.sm, throughput=p.throughput, predicted_slowdown=p.predicted_slowdown, floor=p.floor,
            partners=p.partners, source=p.source, launch=launch, cpu_cores=p.resources.cpu_cores,
            host_mem_mib=p.resources.host_mem_mib,
        )
        return view.to_dict()

    def _node_cluster(self, gpu_id: str) -> Cluster:
        """The one-node cluster of ``gpu_id``: ``launch_settings`` looks its GPU up by a scan of ``cluster.gpus``,
        which on 4,096 GPUs costs more than everything else an admission does."""
        node = self.node_of.get(gpu_id, "")
        cached = self._node_clusters.get(node)
        if cached is None:
            full = self.inp.cluster
            cached = Cluster(full.name, (full.node(node),), full.m_sys_mib, full.max_jobs_per_gpu) if node else full
            self._node_clusters[node] = cached
        return cached

    def _partners_on_busiest_gpu(self, p: Placement) -> tuple[Placement, ...]:
        """The partners of ``p`` on the one of its GPUs they load most.

        ``launch_settings`` checks (and sizes MPS limits against) the sum of the partners it is given on
        *one* GPU; a data-parallel job's partners spread over several GPUs would be summed wrongly.
        """
        best: tuple[float, tuple[Placement, ...]] = (-1.0, ())
        for g in p.gpus:
            on_g = tuple(self.placements[q] for q in p.partners if q in self.placements and g in self.placements[q].gpus)
            load = sum(x.resources.gpu_mem_mib for x in on_g)
            if load > best[0]:
                best = (load, on_g)
        return best[1]

    # ---- writing -------------------------------------------------------------------------------
    def _update(self, job_id: str, **values: Any) -> None:
        self.updates.setdefault(job_id, {}).update(values)

    def _decide(
        self,
        job_id: str,
        kind: DecisionKind,
        reason: str,
        *,
        code: str | None = None,
        token: str | None = None,
        from_knobs: Knobs | None = None,
        to_knobs: Knobs | None = None,
        from_gpus: tuple[str, ...] = (),
        to_gpus: tuple[str, ...] = (),
    ) -> None:
        self.decisions.append({
            "epoch": self.epoch, "job_id": job_id, "kind": kind.value, "reason": reason[:4000], "code": code,
            "token": token, "from_knobs": from_knobs.as_dict() if from_knobs else None,
            "to_knobs": to_knobs.as_dict() if to_knobs else None,
            "from_gpus": list(from_gpus) or None, "to_gpus": list(to_gpus) or None, "at": self.now,
        })

    def _write_epoch(self, prices: Mapping[str, float]) -> None:
        plan = self.inp.plan
        c = self.counts
        self.conn.execute(sa.insert(Epoch), [{
            "epoch": self.epoch, "started_at": self.inp.started_at, "recorded_at": self.now,
            "holder": self.lease.holder, "fence": self.lease.fence, "jobs_planned": len(self.inp.snapshot.rows),
            "placed": len(plan.placements), "queued": len(plan.queued), "admitted": c["admitted"],
            "switched": c["switched"], "migrated": c["migrated"], "preempted": c["preempted"],
            "deferred": c["deferred"], "plan_ms": self.inp.plan_ms, "objective": float(plan.objective),
            "notes": list(self.inp.notes)[:50],
        }])
        if prices:
            self.conn.execute(sa.insert(Price), [{"epoch": self.epoch, "good": g, "price": float(v)} for g, v in prices.items()])

    def _write_queues(self) -> None:
        """Every queue's state as this epoch leaves it (the table holds the cluster's queues only)."""
        statuses = self.inp.plan.queues
        if not statuses and not self.conn.execute(sa.select(QueueRow.name).limit(1)).first():
            return
        self.conn.execute(sa.delete(QueueRow))
        if statuses:
            # the epochs each job has been owed its queue's lent quota, with its queue: a controller started
            # again reads them back (``read_owed``), so a restart does not move the reclaim deadline
            owed: dict[str, dict[str, int]] = {}
            for job_id, n in self.inp.plan.owed.items():
                spec = self.inp.specs.get(job_id)
                if spec is not None:
                    owed.setdefault(spec.queue, {})[job_id] = int(n)
            self.conn.execute(sa.insert(QueueRow), [
                {"name": q.name, "epoch": self.epoch, "status": {**q.as_dict(), "owed": owed.get(q.name, {})},
                 "updated_at": self.now}
                for q in statuses
            ])

    def _write_updates(self) -> None:
        """Bulk UPDATEs, one statement per set of changed columns; every row gets version + 1."""
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for job_id, values in self.updates.items():
            cols = tuple(sorted(values))
            params = {f"v_{k}": v for k, v in values.items()}
            params.update(jid=job_id, old_version=int(self.locked[job_id].version))
            groups.setdefault(cols, []).append(params)
        for cols, rows in groups.items():
            stmt = (
                sa.update(Job)
                .where(Job.id == sa.bindparam("jid"), Job.version == sa.bindparam("old_version"))
                .values({**{c: sa.bindparam(f"v_{c}") for c in cols}, "version": Job.version + 1, "updated_at": self.now})
            )
            self.conn.execute(stmt, rows)


def _holds(p: Placement) -> dict[str, Hold]:
    hold = Hold(p.resources.gpu_mem_mib, p.resources.sm)
    return dict.fromkeys(p.gpus, hold)


def _shortfall(q: Queued | None) -> dict[str, object] | None:
    """The jobs table's ``shortfall`` column: what a waiting job lacks, as the plan says."""
    return q.shortfall.as_dict() if q is not None and q.shortfall is not None else None


def _same_prices(old: Mapping[str, float], new: Mapping[str, float]) -> bool:
    if set(old) != set(new):
        return False
    return all(abs(old[k] - new[k]) <= PRICE_ABS_EPS + PRICE_REL_EPS * abs(old[k]) for k in new)

