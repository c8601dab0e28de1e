"""A queued job's structured shortfall, and an index to page through ended jobs newest first.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-05

The shortfall (binding resource, need, free, where) is what the planner says a queued job lacks; it is kept
beside the rendered reason so that nothing has to parse text. Ended jobs are listed by end time, and with
100k of them a list must not scan the table: hence the (status, finished_at) index.

Frozen: this file must not import ``elastico_core.state.models`` (models change, revisions do not).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("elastico_jobs") as batch:
        batch.add_column(sa.Column("shortfall", JSON, nullable=True))
    op.create_index("ix_elastico_jobs_ended", "elastico_jobs", ["status", "finished_at"])


def downgrade() -> None:
    op.drop_index("ix_elastico_jobs_ended", table_name="elastico_jobs")
    with op.batch_alter_table("elastico_jobs") as batch:
        batch.drop_column("shortfall")
