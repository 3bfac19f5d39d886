"""Finding a KB in a transaction: the one answer for unknown and unreadable ids, and the refusal of writes to
a KB that is being deleted or whose index is managed elsewhere (an external KB)."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session

from ragkb_core.errors import Conflict, NotFound, ReadOnlyKnowledgeBase
from ragkb_store.db.models import KnowledgeBase, utcnow


def kb_not_found(kb_id: str) -> NotFound:
    """The one answer for a KB id that does not exist *and* for one the caller may not read: no byte tells
    them apart, so a client cannot probe which ids exist."""
    return NotFound(f"knowledge base {kb_id} does not exist or is not yours")


def load_kb(session: Session, kb_id: str) -> KnowledgeBase:
    """The KB, or the same NotFound for unknown and ungranted ids."""
    kb = session.get(KnowledgeBase, kb_id)
    if kb is None:
        raise kb_not_found(kb_id)
    return kb


def load_writable_kb(session: Session, kb_id: str) -> KnowledgeBase:
    """The KB, unless it is being deleted (409: see ensure_not_deleting) or external (409: ensure_indexed_here)."""
    kb = load_kb(session, kb_id)
    ensure_not_deleting(kb)
    ensure_indexed_here(kb, "documents are written")
    return kb


def ensure_indexed_here(kb: KnowledgeBase, what: str) -> None:
    """409 for an external KB: its index is managed where it lives and ragkb only reads it, so documents,
    sources, syncs, re-indexes and chunking do not apply. `what` says what was refused, e.g. "re-indexed"."""
    if kb.external is not None:
        raise ReadOnlyKnowledgeBase(
            f"knowledge base {kb.id} is external ({kb.external.get('kind')}): ragkb only searches it, "
            f"nothing is {what} here; change it where it is managed",
            knowledge_base_id=kb.id,
            external_kind=kb.external.get("kind"),
        )


def lock_kb(session: Session, kb_id: str) -> KnowledgeBase:
    """The KB row, written first so that concurrent re-index, rollback and delete calls on it run one at a
    time (PostgreSQL locks the row, SQLite takes its write lock)."""
    session.execute(update(KnowledgeBase).where(KnowledgeBase.id == kb_id).values(updated_at=utcnow()))
    return load_kb(session, kb_id)


def ensure_not_deleting(kb: KnowledgeBase) -> None:
    """409, not 404, for a KB whose deletion job runs (or failed and waits for DELETE again): the KB still
    exists (GET shows it `deleting`, with its job) and a 404 would say it is gone when a retried deletion may
    still have to finish. Once the job has removed it, it answers 404 like any unknown id."""
    if kb.deletion_job_id is not None:
        raise Conflict(
            f"knowledge base {kb.id} is being deleted (job {kb.deletion_job_id})",
            knowledge_base_id=kb.id,
            job_id=kb.deletion_job_id,
        )
