"""KBs keep their retrieval settings and keyword analyzer (ragkb_core.kb_settings, as JSON)

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

BUILT_WITH = '{"japanese": "sudachi", "sudachi_mode_a_subwords": false, "char_bigrams": false}'


def upgrade() -> None:
    # Existing KBs were searched with what are the retrieval defaults (`{}`), and indexed by Sudachi alone:
    # their analyzer is written out in full, so that a later change of the defaults never re-reads it.
    with op.batch_alter_table("knowledge_bases") as batch:
        batch.add_column(sa.Column("retrieval", sa.JSON(), nullable=False, server_default="{}"))
        batch.add_column(sa.Column("analyzer", sa.JSON(), nullable=False, server_default=BUILT_WITH))


def downgrade() -> None:
    with op.batch_alter_table("knowledge_bases") as batch:
        batch.drop_column("analyzer")
        batch.drop_column("retrieval")
