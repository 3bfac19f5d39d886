"""Passage precision per KB (chunking.passage_precision): KBs that exist keep embedding their passages in float32,
as all their documents were, written into their chunking so that no later change of the default
(ragkb_core.kb_settings.KbChunking) can mix precisions in them

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_KBS = sa.table(
    "knowledge_bases", sa.column("id", sa.String), sa.column("chunking", sa.JSON), sa.column("external", sa.JSON)
)


def upgrade() -> None:
    # Each native KB's chunking (an external KB embeds nothing).
    _rewrite_chunking(lambda chunking: {"passage_precision": "float32", **chunking})


def downgrade() -> None:
    _rewrite_chunking(lambda chunking: {key: value for key, value in chunking.items() if key != "passage_precision"})


def _rewrite_chunking(change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    bind = op.get_bind()
    for kb_id, chunking, external in bind.execute(sa.select(_KBS.c.id, _KBS.c.chunking, _KBS.c.external)).all():
        if external is None:
            bind.execute(sa.update(_KBS).where(_KBS.c.id == kb_id).values(chunking=change(chunking or {})))
