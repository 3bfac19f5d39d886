"""KBs keep their sync rules (ragkb_core.kb_settings.KbSync, as JSON); jobs get items to wait for

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # `{}` is the defaults: existing KBs sync with the default excludes and every parseable extension.
    with op.batch_alter_table("knowledge_bases") as batch:
        batch.add_column(sa.Column("sync", sa.JSON(), nullable=False, server_default="{}"))
    op.create_table(
        "job_items",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("kb_id", sa.String(length=32), nullable=False),
        sa.Column("source_id", sa.String(length=1024), nullable=False),
        sa.Column("action", sa.String(length=20), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("base_version", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("job_items") as batch:
        batch.create_index("ix_job_items_job", ["job_id"], unique=False)
        batch.create_index("ix_job_items_open", ["kb_id", "source_id", "status"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("job_items") as batch:
        batch.drop_index("ix_job_items_open")
        batch.drop_index("ix_job_items_job")
    op.drop_table("job_items")
    with op.batch_alter_table("knowledge_bases") as batch:
        batch.drop_column("sync")
