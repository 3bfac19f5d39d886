"""External knowledge bases: a KB whose index is managed elsewhere (a Qdrant collection, a Dify endpoint)

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("knowledge_bases") as batch:
        # ragkb_core.external.ExternalConfig as JSON; null: a native KB (every KB before this revision).
        batch.add_column(sa.Column("external", sa.JSON(), nullable=True))
        # Its credential (an API key), sealed with RAGKB_SOURCES__CREDENTIALS_KEY as sources' credentials are.
        batch.add_column(sa.Column("external_credentials", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("knowledge_bases") as batch:
        batch.drop_column("external_credentials")
        batch.drop_column("external")
