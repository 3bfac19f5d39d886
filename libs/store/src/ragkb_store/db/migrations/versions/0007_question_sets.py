"""Question sets: queries and relevance judgements saved per KB, for evaluations and the re-index gate

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "question_sets",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("kb_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("is_quality_gate", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["kb_id"], ["knowledge_bases.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("kb_id", "name", name="uq_question_sets_kb_name"),
    )
    op.create_table(
        "questions",
        sa.Column("set_id", sa.String(length=32), nullable=False),
        sa.Column("query_id", sa.String(length=200), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["set_id"], ["question_sets.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("set_id", "query_id"),
    )
    op.create_table(
        "judgements",
        sa.Column("set_id", sa.String(length=32), nullable=False),
        sa.Column("query_id", sa.String(length=200), nullable=False),
        sa.Column("source_id", sa.String(length=1024), nullable=False),
        sa.Column("grade", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["set_id"], ["question_sets.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("set_id", "query_id", "source_id"),
    )


def downgrade() -> None:
    op.drop_table("judgements")
    op.drop_table("questions")
    op.drop_table("question_sets")
