"""Counts of what the ledger holds, by state: read at each metrics scrape (ragkb_api.observability), so that a
dashboard shows jobs and documents per state and each KB's live points without anyone keeping a tally."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_store.db.models import Document, Job


def documents_by_status(sessions: sessionmaker[Session]) -> dict[tuple[str, ...], float]:
    with sessions() as session:
        rows = session.execute(select(Document.status, func.count()).group_by(Document.status))
        return {(status,): float(count) for status, count in rows}


def jobs_by_kind_and_status(sessions: sessionmaker[Session]) -> dict[tuple[str, ...], float]:
    with sessions() as session:
        rows = session.execute(select(Job.kind, Job.status, func.count()).group_by(Job.kind, Job.status))
        return {(kind, status): float(count) for kind, status, count in rows}


def live_points_by_kb(sessions: sessionmaker[Session]) -> dict[tuple[str, ...], float]:
    """Chunks of each KB's indexed documents: the points its live index generation serves."""
    with sessions() as session:
        live = Document.indexed_version.is_not(None)
        rows = session.execute(
            select(Document.kb_id, func.sum(Document.chunk_count)).where(live).group_by(Document.kb_id)
        )
        return {(kb_id,): float(total or 0) for kb_id, total in rows}
