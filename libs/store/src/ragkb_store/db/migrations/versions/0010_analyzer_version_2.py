"""Analyzer version 2: every analyzer stored before it says it is version 1 (words "ascii-lower")

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from typing import Any

from alembic import op

from ragkb_store.db.stored_analyzers import rewrite_stored_analyzers

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# KbAnalyzer.words of the analyzer every index built before version 2 holds the terms of.
VERSION_1 = {"words": "ascii-lower"}


def upgrade() -> None:
    # New KBs get version 2 by default (ragkb_core.kb_settings.KbAnalyzer); a KB's index keeps the terms it was
    # built with until it is re-indexed, so its stored analyzer — and the analyzer of its rollback target and of
    # a re-index job under way — must go on reading as version 1.
    rewrite_stored_analyzers(op.get_bind(), _version_1)


def downgrade() -> None:
    # Nothing to undo: code before version 2 ignores the `words` field of a stored analyzer.
    pass


def _version_1(analyzer: Any) -> Any:
    if not isinstance(analyzer, dict) or "words" in analyzer:
        return analyzer
    return {**analyzer, **VERSION_1}
