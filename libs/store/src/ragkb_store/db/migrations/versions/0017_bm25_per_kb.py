"""BM25's k1 and b per KB (KbAnalyzer.bm25_k1, bm25_b): every analyzer stored before says Lucene's 1.2 and 0.75,
the values its index was built with, so that the new defaults (0.9, 0.6) apply to new KBs only

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

from alembic import op

from ragkb_core.kb_settings import with_legacy_bm25
from ragkb_store.db.stored_analyzers import rewrite_stored_analyzers

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A KB's own analyzer, the analyzer of its rollback target and that of a re-index job under way: each names the
    # weights of an index that exists or is being built: Lucene's k1 and b, the server-wide RAGKB_ANALYZER__K1 / __B
    # defaults every index was weighted with until now (ragkb_core.kb_settings.LEGACY_BM25).
    rewrite_stored_analyzers(op.get_bind(), with_legacy_bm25)


def downgrade() -> None:
    # Nothing to undo: code before this revision ignores the fields (and weighs every KB with the server's k1 and b).
    pass
