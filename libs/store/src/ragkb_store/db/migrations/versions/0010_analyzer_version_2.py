"""Analyzer version 2: every analyzer stored before it says it is version 1 (words "ascii-lower")

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# KbAnalyzer.words of the analyzer every index built before version 2 holds the terms of.
VERSION_1 = {"words": "ascii-lower"}

knowledge_bases = sa.table(
    "knowledge_bases", sa.column("id", sa.String), sa.column("analyzer", sa.JSON), sa.column("index_state", sa.JSON)
)
jobs = sa.table("jobs", sa.column("id", sa.String), sa.column("params", sa.JSON))


def upgrade() -> None:
    # New KBs get version 2 by default (ragkb_core.kb_settings.KbAnalyzer); a KB's index keeps the terms it was
    # built with until it is re-indexed, so its stored analyzer — and the analyzer of its rollback target and of
    # a re-index job under way — must go on reading as version 1.
    connection = op.get_bind()
    for kb_id, analyzer, index_state in connection.execute(
        sa.select(knowledge_bases.c.id, knowledge_bases.c.analyzer, knowledge_bases.c.index_state)
    ).all():
        values = {
            "analyzer": _version_1(analyzer),
            "index_state": _with_built_analyzer(index_state, "previous_settings"),
        }
        connection.execute(knowledge_bases.update().where(knowledge_bases.c.id == kb_id).values(**values))
    for job_id, params in connection.execute(sa.select(jobs.c.id, jobs.c.params)).all():
        if isinstance(params, dict) and "settings" in params:
            connection.execute(
                jobs.update().where(jobs.c.id == job_id).values(params=_with_built_analyzer(params, "settings"))
            )


def downgrade() -> None:
    # Nothing to undo: code before version 2 ignores the `words` field of a stored analyzer.
    pass


def _version_1(analyzer: Any) -> Any:
    if not isinstance(analyzer, dict) or "words" in analyzer:
        return analyzer
    return {**analyzer, **VERSION_1}


def _with_built_analyzer(holder: Any, key: str) -> Any:
    """`holder[key]` is a BuildSettings (chunking, analyzer, embedding model) or absent."""
    if not isinstance(holder, dict) or not isinstance(holder.get(key), dict):
        return holder
    settings = holder[key]
    return {**holder, key: {**settings, "analyzer": _version_1(settings.get("analyzer", {}))}}
