"""The GPU ledger: the one place that changes what is reserved on a GPU, inside a caller's write transaction.

Invariant (checked by the tests after every race and crash): for every GPU,
``gpus.used_mem_mib == sum(allocations.mem_mib)`` and ``gpus.jobs == count(allocations)``, the allocations
belong exactly to the jobs whose status holds GPUs (admitted, running, switching), and
``used_mem_mib <= capacity_mib`` (device memory less M_sys), ``jobs <= max_jobs``.

How it holds under concurrency: ``load`` locks the GPU rows it will change (``SELECT ... FOR UPDATE``
in id order on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` has already serialized the transaction), so the
values checked in memory are the values written; CHECK constraints on ``elastico_gpus`` make the database
itself refuse an over-booked row, whatever code path tried. Callers lock job rows *before* GPU rows,
so the controller and the service never wait on each other in a cycle.

A switching job holds, per GPU, the larger of its current and its target reservation: its old process
runs until the launcher acknowledges the switch, so memory it is about to free is not free yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from elastico_core.state.db import StateStore
from elastico_core.state.models import MEM_EPS_MIB, Allocation, Gpu

CHUNK = 500


@dataclass(frozen=True, slots=True)
class Hold:
    """What one job reserves on one GPU."""

    mem_mib: float
    sm: float


@dataclass(slots=True)
class _GpuLine:
    id: str
    capacity_mib: float
    max_jobs: int
    used_mem_mib: float
    jobs: int
    present: bool
    dirty: bool = False


def plan_holds(plan: Mapping[str, object] | None) -> dict[str, Hold]:
    """The reservation a stored plan (``PlanView.to_dict`` form) makes: its per-GPU memory on each of its GPUs."""
    if not plan:
        return {}
    hold = Hold(float(plan["memory_mib"]), float(plan["sm"]))  # type: ignore[arg-type]
    return {str(g): hold for g in plan["gpus"]}  # type: ignore[attr-defined]


def merged_holds(current: Mapping[str, Hold], target: Mapping[str, Hold]) -> dict[str, Hold]:
    """A switching job's reservation: per GPU the larger of what it uses now and what it will use."""
    out: dict[str, Hold] = {}
    for g in set(current) | set(target):
        a, b = current.get(g), target.get(g)
        if a is None or b is None:
            out[g] = a or b  # type: ignore[assignment]
        else:
            out[g] = Hold(max(a.mem_mib, b.mem_mib), max(a.sm, b.sm))
    return out


class Ledger:
    """GPU accounting within one write transaction: ``load``, then ``check``/``apply`` per job, then ``flush``."""

    def __init__(self, conn: Connection, store: StateStore) -> None:
        self.conn = conn
        self.store = store
        self.gpus: dict[str, _GpuLine] = {}
        self.holds: dict[str, dict[str, Hold]] = {}
        self._changed_jobs: set[str] = set()
        self._original: dict[str, dict[str, Hold]] = {}

    # ---- reads (with locks) -------------------------------------------------------------------
    def load(self, job_ids: Iterable[str], gpu_ids: Iterable[str] = ()) -> None:
        """Read the allocations of ``job_ids`` and lock every GPU they or ``gpu_ids`` touch."""
        jobs = sorted(set(job_ids) - set(self.holds))
        for i in range(0, len(jobs), CHUNK):
            part = jobs[i : i + CHUNK]
            for job_id in part:
                self.holds.setdefault(job_id, {})
            rows = self.conn.execute(
                sa.select(Allocation.job_id, Allocation.gpu_id, Allocation.mem_mib, Allocation.sm).where(
                    Allocation.job_id.in_(part)
                )
            )
            for job_id, gpu_id, mem, sm in rows:
                self.holds[job_id][gpu_id] = Hold(float(mem), float(sm))
        for job_id in jobs:
            self._original[job_id] = dict(self.holds[job_id])
        wanted = set(gpu_ids) | {g for j in jobs for g in self.holds[j]}
        missing = sorted(wanted - set(self.gpus))
        for i in range(0, len(missing), CHUNK):
            part = missing[i : i + CHUNK]
            stmt = self.store.for_update(
                sa.select(Gpu.id, Gpu.capacity_mib, Gpu.max_jobs, Gpu.used_mem_mib, Gpu.jobs, Gpu.present)
                .where(Gpu.id.in_(part))
                .order_by(Gpu.id)
            )
            for gid, cap, max_jobs, used, n, present in self.conn.execute(stmt):
                self.gpus[gid] = _GpuLine(gid, float(cap), int(max_jobs), float(used), int(n), bool(present))

    # ---- decisions ----------------------------------------------------------------------------
    def check(self, job_id: str, new: Mapping[str, Hold]) -> str | None:
        """None if ``job_id`` may hold exactly ``new``; else why not (the GPU and what it lacks)."""
        old = self.holds.get(job_id, {})
        for g, hold in sorted(new.items()):
            line = self.gpus.get(g)
            if line is None:
                return f"GPU {g} is not in the ledger"
            before = old.get(g)
            if before is None and not line.present:
                return f"GPU {g} is no longer in the cluster"
            d_mem = hold.mem_mib - (before.mem_mib if before else 0.0)
            d_jobs = 0 if before else 1
            if d_mem > 0 and line.used_mem_mib + d_mem > line.capacity_mib + MEM_EPS_MIB / 2:
                free = line.capacity_mib - line.used_mem_mib
                return f"GPU {g} has {free:.0f} MiB free, {d_mem:.0f} MiB more needed (memory still held by other jobs)"
            if d_jobs and line.jobs + 1 > line.max_jobs:
                return f"GPU {g} already holds {line.jobs} jobs (at most {line.max_jobs})"
        return None

    def apply(self, job_id: str, new: Mapping[str, Hold]) -> None:
        """Make ``job_id`` hold exactly ``new`` (``{}`` releases it). Call ``check`` first for growth."""
        old = self.holds.get(job_id, {})
        for g in set(old) | set(new):
            line = self.gpus.get(g)
            if line is None:
                raise KeyError(f"GPU {g} was not loaded into the ledger")
            before, after = old.get(g), new.get(g)
            line.used_mem_mib += (after.mem_mib if after else 0.0) - (before.mem_mib if before else 0.0)
            line.jobs += (1 if after else 0) - (1 if before else 0)
            if abs(line.used_mem_mib) < 1e-6:
                line.used_mem_mib = 0.0
            line.dirty = True
        self.holds[job_id] = dict(new)
        self._changed_jobs.add(job_id)

    # ---- writes -------------------------------------------------------------------------------
    def flush(self, epoch: int) -> None:
        """Write changed GPU lines and allocations (bulk statements; the rows are ours until commit)."""
        dirty = [g for g in self.gpus.values() if g.dirty]
        if dirty:
            self.conn.execute(
                sa.update(Gpu).where(Gpu.id == sa.bindparam("gid")).values(
                    used_mem_mib=sa.bindparam("used"), jobs=sa.bindparam("n")
                ),
                [{"gid": g.id, "used": g.used_mem_mib, "n": g.jobs} for g in dirty],
            )
        deletes, inserts, updates = [], [], []
        for job_id in sorted(self._changed_jobs):
            old, new = self._original.get(job_id, {}), self.holds[job_id]
            for g in old.keys() - new.keys():
                deletes.append({"j": job_id, "g": g})
            for g in new.keys() - old.keys():
                inserts.append({"job_id": job_id, "gpu_id": g, "mem_mib": new[g].mem_mib, "sm": new[g].sm, "epoch": epoch})
            for g in new.keys() & old.keys():
                if new[g] != old[g]:
                    updates.append({"j": job_id, "g": g, "m": new[g].mem_mib, "s": new[g].sm, "e": epoch})
        if deletes:
            self.conn.execute(
                sa.delete(Allocation).where(Allocation.job_id == sa.bindparam("j"), Allocation.gpu_id == sa.bindparam("g")),
                deletes,
            )
        if updates:
            self.conn.execute(
                sa.update(Allocation)
                .where(Allocation.job_id == sa.bindparam("j"), Allocation.gpu_id == sa.bindparam("g"))
                .values(mem_mib=sa.bindparam("m"), sm=sa.bindparam("s"), epoch=sa.bindparam("e")),
                updates,
            )
        if inserts:
            self.conn.execute(sa.insert(Allocation), inserts)
        for line in dirty:
            line.dirty = False
        for job_id in self._changed_jobs:
            self._original[job_id] = dict(self.holds[job_id])
        self._changed_jobs.clear()
