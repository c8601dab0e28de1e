"""Initial schema of the planner state: jobs, GPU ledger, controller lease, epochs, decisions, prices, measurements.

Revision ID: 0001
Revises:
Create Date: 2026-12-02

Frozen: this file must not import ``elastico_core.state.models`` (models change, revisions do not).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
TS = sa.DateTime(timezone=True)
MEM_EPS_MIB = 0.01


def upgrade() -> None:
    op.create_table(
        "elastico_controller",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(200), nullable=True),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("expires_unix", sa.Float(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("prices", JSON, nullable=True),
        sa.Column("heartbeat_at", TS, nullable=True),
        sa.Column("cluster_yaml", sa.Text(), nullable=True),
        sa.Column("cluster_hash", sa.String(64), nullable=True),
    )
    op.create_table(
        "elastico_epochs",
        sa.Column("epoch", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("recorded_at", TS, nullable=False),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("jobs_planned", sa.Integer(), nullable=False),
        sa.Column("placed", sa.Integer(), nullable=False),
        sa.Column("queued", sa.Integer(), nullable=False),
        sa.Column("admitted", sa.Integer(), nullable=False),
        sa.Column("switched", sa.Integer(), nullable=False),
        sa.Column("migrated", sa.Integer(), nullable=False),
        sa.Column("preempted", sa.Integer(), nullable=False),
        sa.Column("deferred", sa.Integer(), nullable=False),
        sa.Column("plan_ms", sa.Float(), nullable=False),
        sa.Column("objective", sa.Float(), nullable=False),
        sa.Column("notes", JSON, nullable=False),
    )
    op.create_table(
        "elastico_gpus",
        sa.Column("id", sa.String(300), primary_key=True),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(64), nullable=False),
        sa.Column("signature", sa.String(400), nullable=False),
        sa.Column("memory_mib", sa.Float(), nullable=False),
        sa.Column("capacity_mib", sa.Float(), nullable=False),
        sa.Column("max_jobs", sa.Integer(), nullable=False),
        sa.Column("used_mem_mib", sa.Float(), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.Column("present", sa.Boolean(), nullable=False),
        sa.CheckConstraint("jobs >= 0 AND jobs <= max_jobs", name="ck_elastico_gpus_jobs"),
        sa.CheckConstraint(f"used_mem_mib <= capacity_mib + {MEM_EPS_MIB}", name="ck_elastico_gpus_memory"),
        sa.CheckConstraint(f"used_mem_mib >= -{MEM_EPS_MIB}", name="ck_elastico_gpus_memory_nonneg"),
    )
    op.create_table(
        "elastico_jobs",
        sa.Column("id", sa.String(253), primary_key=True),
        sa.Column("identity_digest", sa.String(64), nullable=False, unique=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=True),
        sa.Column("run_id", sa.String(250), nullable=True),
        sa.Column("task_id", sa.String(250), nullable=True),
        sa.Column("map_index", sa.Integer(), nullable=True),
        sa.Column("last_try", sa.Integer(), nullable=True),
        sa.Column("workload", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("spec", JSON, nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("plan", JSON, nullable=True),
        sa.Column("target", JSON, nullable=True),
        sa.Column("pending_action", sa.String(16), nullable=True),
        sa.Column("plan_seq", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("oom_kills", sa.Integer(), nullable=False),
        sa.Column("knob_limits", JSON, nullable=True),
        sa.Column("oom_pending", JSON, nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("queue_code", sa.String(32), nullable=True),
        sa.Column("measured_throughput", sa.Float(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("admitted_at", TS, nullable=True),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.CheckConstraint(
            "status IN ('pending','admitted','running','switching','finished','failed','cancelled')",
            name="ck_elastico_jobs_status",
        ),
    )
    op.create_index("ix_elastico_jobs_queue", "elastico_jobs", ["status", "priority", "created_at", "id"])
    op.create_table(
        "elastico_allocations",
        sa.Column("job_id", sa.String(253), sa.ForeignKey("elastico_jobs.id"), primary_key=True),
        sa.Column("gpu_id", sa.String(300), sa.ForeignKey("elastico_gpus.id"), primary_key=True),
        sa.Column("mem_mib", sa.Float(), nullable=False),
        sa.Column("sm", sa.Float(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
    )
    op.create_index("ix_elastico_allocations_gpu", "elastico_allocations", ["gpu_id"])
    op.create_table(
        "elastico_decisions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("epoch", sa.Integer(), sa.ForeignKey("elastico_epochs.epoch"), nullable=False),
        sa.Column("job_id", sa.String(253), sa.ForeignKey("elastico_jobs.id"), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("code", sa.String(32), nullable=True),
        sa.Column("token", sa.String(300), nullable=True, unique=True),
        sa.Column("from_knobs", JSON, nullable=True),
        sa.Column("to_knobs", JSON, nullable=True),
        sa.Column("from_gpus", JSON, nullable=True),
        sa.Column("to_gpus", JSON, nullable=True),
        sa.Column("at", TS, nullable=False),
    )
    op.create_index("ix_elastico_decisions_epoch", "elastico_decisions", ["epoch"])
    op.create_index("ix_elastico_decisions_job", "elastico_decisions", ["job_id", "id"])
    op.create_table(
        "elastico_events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(253), sa.ForeignKey("elastico_jobs.id"), nullable=False),
        sa.Column("kind", sa.String(24), nullable=False),
        sa.Column("token", sa.String(300), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("at", TS, nullable=False),
    )
    op.create_index("ix_elastico_events_job", "elastico_events", ["job_id", "id"])
    op.create_table(
        "elastico_measurements",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(253), sa.ForeignKey("elastico_jobs.id"), nullable=False),
        sa.Column("token", sa.String(300), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("workload", sa.String(128), nullable=False),
        sa.Column("knobs", JSON, nullable=False),
        sa.Column("gpu_model", sa.String(64), nullable=False),
        sa.Column("signature", sa.String(400), nullable=False),
        sa.Column("gpu_id", sa.String(300), nullable=False),
        sa.Column("throughput", sa.Float(), nullable=True),
        sa.Column("predicted_throughput", sa.Float(), nullable=True),
        sa.Column("predicted_slowdown", sa.Float(), nullable=True),
        sa.Column("colocated", sa.Boolean(), nullable=False),
        sa.Column("budget_mib", sa.Float(), nullable=True),
        sa.Column("observed_mem_mib", sa.Float(), nullable=True),
        sa.Column("at", TS, nullable=False),
        sa.Column("fed", sa.Boolean(), nullable=False),
        sa.Column("fed_note", sa.Text(), nullable=False),
    )
    op.create_index("ix_elastico_measurements_fed", "elastico_measurements", ["fed", "id"])
    op.create_index("ix_elastico_measurements_job", "elastico_measurements", ["job_id", "id"])
    op.create_table(
        "elastico_prices",
        sa.Column("epoch", sa.Integer(), sa.ForeignKey("elastico_epochs.epoch"), primary_key=True),
        sa.Column("good", sa.String(128), primary_key=True),
        sa.Column("price", sa.Float(), nullable=False),
    )
    # the lease row the controllers compete for (created here so acquiring it is a plain conditional UPDATE)
    controller = sa.table(
        "elastico_controller",
        sa.column("name", sa.String),
        sa.column("fence", sa.Integer),
        sa.column("expires_unix", sa.Float),
        sa.column("epoch", sa.Integer),
    )
    op.bulk_insert(controller, [{"name": "default", "fence": 0, "expires_unix": 0.0, "epoch": 0}])


def downgrade() -> None:
    for table in (
        "elastico_prices",
        "elastico_measurements",
        "elastico_events",
        "elastico_decisions",
        "elastico_allocations",
        "elastico_jobs",
        "elastico_gpus",
        "elastico_epochs",
        "elastico_controller",
    ):
        op.drop_table(table)
