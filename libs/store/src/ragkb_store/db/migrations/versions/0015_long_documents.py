"""Long documents in parallel: a split document's version (document_splits) and its page ranges
(document_ranges), and the ranges built so far on the document (its progress)

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("ranges_done", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("ranges_total", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "document_splits",
        sa.Column(
            "document_id",
            sa.String(32),
            sa.ForeignKey("documents.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("embedding_model", sa.String(200), nullable=False),
        sa.Column("text_sha256", sa.String(64), nullable=False),
        sa.Column("ingest_report", sa.JSON(), nullable=False),
        sa.Column("stage_timings", sa.JSON(), nullable=False),
        sa.Column("chunk_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "document_ranges",
        sa.Column(
            "document_id",
            sa.String(32),
            sa.ForeignKey("document_splits.document_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("position", sa.Integer(), primary_key=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("first_page", sa.Integer(), nullable=False),
        sa.Column("last_page", sa.Integer(), nullable=False),
        sa.Column("first_ordinal", sa.Integer(), nullable=False),
        sa.Column("chunks", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("stage_timings", sa.JSON(), nullable=False),
        sa.Column("vectors", sa.JSON(), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("document_ranges")
    op.drop_table("document_splits")
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("ranges_total")
        batch.drop_column("ranges_done")
