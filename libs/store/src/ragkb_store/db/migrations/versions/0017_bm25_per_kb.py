"""BM25's k1 and b per KB (KbAnalyzer.bm25_k1, bm25_b): every analyzer stored before says Lucene's 1.2 and 0.75,
the values its index was built with, so that the new defaults (0.9, 0.6) apply to new KBs only

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# The server-wide RAGKB_ANALYZER__K1 / __B defaults every index was weighted with until now.
LEGACY_BM25 = {"bm25_k1": 1.2, "bm25_b": 0.75}

knowledge_bases = sa.table(
    "knowledge_bases", sa.column("id", sa.String), sa.column("analyzer", sa.JSON), sa.column("index_state", sa.JSON)
)
jobs = sa.table("jobs", sa.column("id", sa.String), sa.column("params", sa.JSON))


def upgrade() -> None:
    # A KB's own analyzer, the analyzer of its rollback target and that of a re-index job under way: each names the
    # weights of an index that exists or is being built.
    connection = op.get_bind()
    for kb_id, analyzer, index_state in connection.execute(
        sa.select(knowledge_bases.c.id, knowledge_bases.c.analyzer, knowledge_bases.c.index_state)
    ).all():
        values = {
            "analyzer": _legacy(analyzer),
            "index_state": _with_built_analyzer(index_state, "previous_settings"),
        }
        connection.execute(knowledge_bases.update().where(knowledge_bases.c.id == kb_id).values(**values))
    for job_id, params in connection.execute(sa.select(jobs.c.id, jobs.c.params)).all():
        if isinstance(params, dict) and "settings" in params:
            connection.execute(
                jobs.update().where(jobs.c.id == job_id).values(params=_with_built_analyzer(params, "settings"))
            )


def downgrade() -> None:
    # Nothing to undo: code before this revision ignores the fields (and weighs every KB with the server's k1 and b).
    pass


def _legacy(analyzer: Any) -> Any:
    if not isinstance(analyzer, dict) or "bm25_k1" in analyzer:
        return analyzer
    return {**analyzer, **LEGACY_BM25}


def _with_built_analyzer(holder: Any, key: str) -> Any:
    """`holder[key]` is a BuildSettings (chunking, analyzer, embedding model) or absent."""
    if not isinstance(holder, dict) or not isinstance(holder.get(key), dict):
        return holder
    settings = holder[key]
    return {**holder, key: {**settings, "analyzer": _legacy(settings.get("analyzer", {}))}}
