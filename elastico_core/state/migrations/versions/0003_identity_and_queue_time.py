"""The state's identity, and the time a job (re)entered the queue.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-06

* ``elastico_identity``: one row holding a random id written when the state is created (or upgraded to
  this revision). A controller remembers the id it started with and checks it every epoch, so a state that
  was deleted and re-created under the same name (a new, empty SQLite file) is never taken for the old one:
  the deleted-file split brain, where the controller kept writing to the unlinked file while everyone else
  used a new one, becomes a loud, retried error instead.
* ``elastico_jobs.queued_at``: the queue is ordered by (priority, queued_at, id). It starts as the
  registration time and moves to the release time when the start deadline takes a job's GPUs back
  (Kueue's ``requeuingStrategy`` with the eviction timestamp), so a released job does not get the same
  reservation back ahead of the jobs that waited behind it.

Frozen: this file must not import ``elastico_core.state.models`` (models change, revisions do not).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    identity = op.create_table(
        "elastico_identity",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("state_id", sa.String(36), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.CheckConstraint("id = 1", name="ck_elastico_identity_one"),
    )
    now = dt.datetime.now(dt.UTC)
    if op.get_bind().dialect.name == "sqlite":
        now = now.replace(tzinfo=None)  # stored as naive UTC text, as the models' UTCDateTime does
    op.bulk_insert(identity, [{"id": 1, "state_id": str(uuid.uuid4()), "created_at": now}])
    with op.batch_alter_table("elastico_jobs") as batch:
        batch.add_column(sa.Column("queued_at", TS, nullable=True))
    op.execute("UPDATE elastico_jobs SET queued_at = created_at")
    with op.batch_alter_table("elastico_jobs") as batch:
        batch.alter_column("queued_at", existing_type=TS, nullable=False)
    op.drop_index("ix_elastico_jobs_queue", table_name="elastico_jobs")
    op.create_index("ix_elastico_jobs_queue", "elastico_jobs", ["status", "priority", "queued_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_elastico_jobs_queue", table_name="elastico_jobs")
    op.create_index("ix_elastico_jobs_queue", "elastico_jobs", ["status", "priority", "created_at", "id"])
    with op.batch_alter_table("elastico_jobs") as batch:
        batch.drop_column("queued_at")
    op.drop_table("elastico_identity")
