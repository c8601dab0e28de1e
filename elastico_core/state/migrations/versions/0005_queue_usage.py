"""Each queue's state after the last recorded epoch (quotas, usage, what it borrows and lends).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07

One row per queue of the cluster the controller plans against (``model.plan.QueueStatus`` as JSON), written
with the epoch that changed it, so ``elastico queues list`` and the status page read the planner's own
figures (fair share, borrowed, lent, shadow price) without planning again.

Frozen: this file must not import ``elastico_core.state.models`` (models change, revisions do not).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    op.create_table(
        "elastico_queues",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("status", JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("elastico_queues")
