"""SQLAlchemy 2 models of the planner state. The migrations in ``migrations/versions`` create exactly these.

Nothing outside ``elastico_core.state`` imports this module: the Airflow side and the CLI go through
``JobService`` and read frozen values (``values.py``), so the schema can change behind a migration.

Tables (all prefixed ``elastico_`` so they can share a database with Airflow or MLflow):

* ``jobs``: one row per registered job: its spec, status, current plan and switch target, counters,
  the external identity that registered it (unique), its user and queue (for filters), the launcher's
  latest progress report, timestamps and a version for optimistic concurrency;
* ``gpus``: the GPU ledger: one row per device with its usable memory and what is reserved on it, guarded
  by CHECK constraints, so no code path can commit an over-booked GPU;
* ``allocations``: which job holds how much of which GPU (the ledger's detail; sums equal ``gpus``);
* ``controller``: the controller lease (holder, fencing token, expiry), the last recorded epoch and its
  prices (the next epoch's warm start), and the cluster document the controller plans against;
* ``epochs``, ``decisions``, ``prices``: what each recorded epoch decided and why, and the shadow prices;
* ``measurements``: throughputs and OOM kills the launchers reported, and whether they reached the
  profile store; ``events``: an audit trail of every report and status change made through the service;
* ``identity``: one row, the random id of this state (``state.identity``), written when it is created.
* ``queues``: each queue's state after the last epoch that changed it (``model.plan.QueueStatus``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# GPU-memory tolerance of the ledger's CHECK constraints (MiB): float sums of per-job budgets.
MEM_EPS_MIB = 0.01


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Timezone-aware UTC timestamps on every backend (SQLite stores naive text; we re-attach UTC)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: sa.Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: dt.datetime | None, dialect: sa.Dialect) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


JSONValue = sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dt.datetime: UTCDateTime(), dict[str, Any]: JSONValue, list[Any]: JSONValue}


class Job(Base):
    __tablename__ = "elastico_jobs"

    id: Mapped[str] = mapped_column(sa.String(253), primary_key=True)
    identity_digest: Mapped[str] = mapped_column(sa.String(64), unique=True)
    source: Mapped[str] = mapped_column(sa.String(16))
    dag_id: Mapped[str | None] = mapped_column(sa.String(250))
    run_id: Mapped[str | None] = mapped_column(sa.String(250))
    task_id: Mapped[str | None] = mapped_column(sa.String(250))
    map_index: Mapped[int | None] = mapped_column(sa.Integer)
    last_try: Mapped[int | None] = mapped_column(sa.Integer)
    workload: Mapped[str] = mapped_column(sa.String(128))
    kind: Mapped[str] = mapped_column(sa.String(8))
    owner: Mapped[str] = mapped_column(sa.String(128), default="")
    queue: Mapped[str] = mapped_column(sa.String(63), default="default", server_default="default")
    priority: Mapped[int] = mapped_column(sa.Integer, default=0)
    spec: Mapped[dict[str, Any]] = mapped_column(JSONValue)
    spec_hash: Mapped[str] = mapped_column(sa.String(64))
    status: Mapped[str] = mapped_column(sa.String(16))
    plan: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    target: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    pending_action: Mapped[str | None] = mapped_column(sa.String(16))
    plan_seq: Mapped[int] = mapped_column(sa.Integer, default=0)
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0)
    oom_kills: Mapped[int] = mapped_column(sa.Integer, default=0)
    knob_limits: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    oom_pending: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    reason: Mapped[str] = mapped_column(sa.Text, default="")
    queue_code: Mapped[str | None] = mapped_column(sa.String(32))
    shortfall: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    measured_throughput: Mapped[float | None] = mapped_column(sa.Float)
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)  # the launcher's latest report (values.Progress)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    queued_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())  # queue order: registration, or last release
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    admitted_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    version: Mapped[int] = mapped_column(sa.Integer, default=1)

    __mapper_args__ = {"version_id_col": version}  # noqa: RUF012 - SQLAlchemy's own convention
    __table_args__ = (
        sa.Index("ix_elastico_jobs_queue", "status", "priority", "queued_at", "id"),
        sa.Index("ix_elastico_jobs_ended", "status", "finished_at"),
        sa.Index("ix_elastico_jobs_owner", "owner"),
        sa.Index("ix_elastico_jobs_dag", "dag_id"),
        sa.Index("ix_elastico_jobs_queue_name", "queue"),
        sa.CheckConstraint(
            "status IN ('pending','admitted','running','switching','finished','failed','cancelled')",
            name="ck_elastico_jobs_status",
        ),
    )


class Gpu(Base):
    __tablename__ = "elastico_gpus"

    id: Mapped[str] = mapped_column(sa.String(300), primary_key=True)
    node: Mapped[str] = mapped_column(sa.String(253))
    idx: Mapped[int] = mapped_column(sa.Integer)
    model: Mapped[str] = mapped_column(sa.String(64))
    signature: Mapped[str] = mapped_column(sa.String(400))
    memory_mib: Mapped[float] = mapped_column(sa.Float)
    capacity_mib: Mapped[float] = mapped_column(sa.Float)
    max_jobs: Mapped[int] = mapped_column(sa.Integer)
    used_mem_mib: Mapped[float] = mapped_column(sa.Float, default=0.0)
    jobs: Mapped[int] = mapped_column(sa.Integer, default=0)
    present: Mapped[bool] = mapped_column(sa.Boolean, default=True)

    __table_args__ = (
        sa.CheckConstraint(f"used_mem_mib <= capacity_mib + {MEM_EPS_MIB}", name="ck_elastico_gpus_memory"),
        sa.CheckConstraint(f"used_mem_mib >= -{MEM_EPS_MIB}", name="ck_elastico_gpus_memory_nonneg"),
        sa.CheckConstraint("jobs >= 0 AND jobs <= max_jobs", name="ck_elastico_gpus_jobs"),
    )


class Allocation(Base):
    __tablename__ = "elastico_allocations"

    job_id: Mapped[str] = mapped_column(sa.String(253), sa.ForeignKey("elastico_jobs.id"), primary_key=True)
    gpu_id: Mapped[str] = mapped_column(sa.String(300), sa.ForeignKey("elastico_gpus.id"), primary_key=True)
    mem_mib: Mapped[float] = mapped_column(sa.Float)  # reserved: max(current, target) while switching
    sm: Mapped[float] = mapped_column(sa.Float)
    epoch: Mapped[int] = mapped_column(sa.Integer)

    __table_args__ = (sa.Index("ix_elastico_allocations_gpu", "gpu_id"),)


class Controller(Base):
    __tablename__ = "elastico_controller"

    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    holder: Mapped[str | None] = mapped_column(sa.String(200))
    fence: Mapped[int] = mapped_column(sa.Integer, default=0)
    expires_unix: Mapped[float] = mapped_column(sa.Float, default=0.0)
    epoch: Mapped[int] = mapped_column(sa.Integer, default=0)
    prices: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    cluster_yaml: Mapped[str | None] = mapped_column(sa.Text)
    cluster_hash: Mapped[str | None] = mapped_column(sa.String(64))


class Epoch(Base):
    __tablename__ = "elastico_epochs"

    epoch: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=False)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    recorded_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    holder: Mapped[str] = mapped_column(sa.String(200))
    fence: Mapped[int] = mapped_column(sa.Integer)
    jobs_planned: Mapped[int] = mapped_column(sa.Integer)
    placed: Mapped[int] = mapped_column(sa.Integer)
    queued: Mapped[int] = mapped_column(sa.Integer)
    admitted: Mapped[int] = mapped_column(sa.Integer)
    switched: Mapped[int] = mapped_column(sa.Integer)
    migrated: Mapped[int] = mapped_column(sa.Integer)
    preempted: Mapped[int] = mapped_column(sa.Integer)
    deferred: Mapped[int] = mapped_column(sa.Integer)
    plan_ms: Mapped[float] = mapped_column(sa.Float)
    objective: Mapped[float] = mapped_column(sa.Float)
    notes: Mapped[list[Any]] = mapped_column(JSONValue)


class Decision(Base):
    __tablename__ = "elastico_decisions"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    epoch: Mapped[int] = mapped_column(sa.Integer, sa.ForeignKey("elastico_epochs.epoch"))
    job_id: Mapped[str] = mapped_column(sa.String(253), sa.ForeignKey("elastico_jobs.id"))
    kind: Mapped[str] = mapped_column(sa.String(16))
    reason: Mapped[str] = mapped_column(sa.Text)
    code: Mapped[str | None] = mapped_column(sa.String(32))
    token: Mapped[str | None] = mapped_column(sa.String(300), unique=True)  # one admission/switch per token
    from_knobs: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    to_knobs: Mapped[dict[str, Any] | None] = mapped_column(JSONValue)
    from_gpus: Mapped[list[Any] | None] = mapped_column(JSONValue)
    to_gpus: Mapped[list[Any] | None] = mapped_column(JSONValue)
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime())

    __table_args__ = (
        sa.Index("ix_elastico_decisions_job", "job_id", "id"),
        sa.Index("ix_elastico_decisions_epoch", "epoch"),
    )


class Price(Base):
    __tablename__ = "elastico_prices"

    epoch: Mapped[int] = mapped_column(sa.Integer, sa.ForeignKey("elastico_epochs.epoch"), primary_key=True)
    good: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    price: Mapped[float] = mapped_column(sa.Float)


class Measurement(Base):
    __tablename__ = "elastico_measurements"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(sa.String(253), sa.ForeignKey("elastico_jobs.id"))
    token: Mapped[str] = mapped_column(sa.String(300))
    kind: Mapped[str] = mapped_column(sa.String(16))  # progress | final | oom
    workload: Mapped[str] = mapped_column(sa.String(128))
    knobs: Mapped[dict[str, Any]] = mapped_column(JSONValue)
    gpu_model: Mapped[str] = mapped_column(sa.String(64))
    signature: Mapped[str] = mapped_column(sa.String(400))
    gpu_id: Mapped[str] = mapped_column(sa.String(300))
    throughput: Mapped[float | None] = mapped_column(sa.Float)
    predicted_throughput: Mapped[float | None] = mapped_column(sa.Float)
    predicted_slowdown: Mapped[float | None] = mapped_column(sa.Float)
    colocated: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    budget_mib: Mapped[float | None] = mapped_column(sa.Float)
    observed_mem_mib: Mapped[float | None] = mapped_column(sa.Float)
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    fed: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    fed_note: Mapped[str] = mapped_column(sa.Text, default="")

    __table_args__ = (
        sa.Index("ix_elastico_measurements_fed", "fed", "id"),
        sa.Index("ix_elastico_measurements_job", "job_id", "id"),
    )


class Event(Base):
    __tablename__ = "elastico_events"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(sa.String(253), sa.ForeignKey("elastico_jobs.id"))
    kind: Mapped[str] = mapped_column(sa.String(24))
    token: Mapped[str | None] = mapped_column(sa.String(300))
    detail: Mapped[str] = mapped_column(sa.Text, default="")
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime())

    __table_args__ = (sa.Index("ix_elastico_events_job", "job_id", "id"),)


class Identity(Base):
    """The state's identity: one row (id 1) with a random id, written when the state is created."""

    __tablename__ = "elastico_identity"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=False)
    state_id: Mapped[str] = mapped_column(sa.String(36))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())

    __table_args__ = (sa.CheckConstraint("id = 1", name="ck_elastico_identity_one"),)


class QueueRow(Base):
    __tablename__ = "elastico_queues"

    name: Mapped[str] = mapped_column(sa.String(63), primary_key=True)
    epoch: Mapped[int] = mapped_column(sa.Integer)
    status: Mapped[dict[str, Any]] = mapped_column(JSONValue)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


DEFAULT_CONTROLLER = "default"
