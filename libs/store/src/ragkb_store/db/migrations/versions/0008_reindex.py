"""Re-index: jobs keep their parameters; KBs keep which index generations serve and what they were built with

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("params", sa.JSON(), nullable=False, server_default="{}"))
    with op.batch_alter_table("knowledge_bases") as batch:
        batch.add_column(sa.Column("index_state", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("knowledge_bases") as batch:
        batch.drop_column("index_state")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("params")
