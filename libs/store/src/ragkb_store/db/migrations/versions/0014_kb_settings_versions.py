"""Numbered versions of each KB's retrieval settings (who, when, why), the first one the settings as they are

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    versions = op.create_table(
        "kb_settings_versions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("kb_id", sa.String(32), sa.ForeignKey("knowledge_bases.id", ondelete="CASCADE"), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("retrieval", sa.JSON(), nullable=False),
        sa.Column("origin", sa.String(20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("author_key_id", sa.String(32), nullable=True),
        sa.Column("tune_job_id", sa.String(32), nullable=True),
        sa.Column("reverted_to", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("kb_id", "version", name="uq_kb_settings_versions_kb_version"),
    )
    # Every existing KB starts its history with the settings it has, so that a later change can be reverted.
    kbs = sa.table("knowledge_bases", sa.column("id", sa.String), sa.column("retrieval", sa.JSON))
    now = datetime.now(UTC)
    rows = [
        {
            "kb_id": kb_id,
            "version": 1,
            "retrieval": retrieval or {},
            "origin": "migration",
            "reason": "the settings when versions began",
            "created_at": now,
        }
        for kb_id, retrieval in op.get_bind().execute(sa.select(kbs.c.id, kbs.c.retrieval))
    ]
    if rows:
        op.bulk_insert(versions, rows)


def downgrade() -> None:
    op.drop_table("kb_settings_versions")
