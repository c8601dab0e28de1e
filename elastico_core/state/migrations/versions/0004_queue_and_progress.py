"""A job's queue (a label users filter by, as Kueue's queues) and the launcher's latest progress report.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-06

``queue`` comes from the job spec (default ``default``); ``progress`` is the JSON of ``values.Progress``
(steps and work done, the total when the workload knows it, the latest rate, when it was reported), from
which the command line and the status page derive a job's progress and ETA. Indexes on the three columns
``jobs list --user/--dag/--queue`` filter by.

Frozen: this file must not import ``elastico_core.state.models`` (models change, revisions do not).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("elastico_jobs") as batch:
        batch.add_column(sa.Column("queue", sa.String(63), nullable=False, server_default="default"))
        batch.add_column(sa.Column("progress", JSON, nullable=True))
    op.create_index("ix_elastico_jobs_owner", "elastico_jobs", ["owner"])
    op.create_index("ix_elastico_jobs_dag", "elastico_jobs", ["dag_id"])
    op.create_index("ix_elastico_jobs_queue_name", "elastico_jobs", ["queue"])


def downgrade() -> None:
    op.drop_index("ix_elastico_jobs_queue_name", table_name="elastico_jobs")
    op.drop_index("ix_elastico_jobs_dag", table_name="elastico_jobs")
    op.drop_index("ix_elastico_jobs_owner", table_name="elastico_jobs")
    with op.batch_alter_table("elastico_jobs") as batch:
        batch.drop_column("progress")
        batch.drop_column("queue")
