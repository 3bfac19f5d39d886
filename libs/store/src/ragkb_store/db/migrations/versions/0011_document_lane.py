"""Fair queueing: a document records the lane (queue) its ingestion waits in, so that the sweeper queues it
again on the same one

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Documents recorded before lanes went through the one queue there was, which is now the interactive one.
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("lane", sa.String(20), nullable=False, server_default="interactive"))


def downgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("lane")
