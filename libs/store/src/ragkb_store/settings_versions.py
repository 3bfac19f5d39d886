"""The history of a KB's retrieval settings: every change is a numbered version (who, when, why), and any
version can be brought back as a new one. The functions take the caller's session and are steps of its
transaction, with the KB row locked (ragkb_store.knowledge_bases.lock_kb) so that two changes cannot take the
same number (the unique constraint refuses it anyway)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ragkb_core.errors import NotFound
from ragkb_store.db.models import KnowledgeBase, SettingsVersion
from ragkb_store.states import SettingsOrigin

FIRST_VERSION_REASON = "the settings before the first recorded change"


@dataclass(frozen=True)
class Change:
    """Why the settings change, and who changes them."""

    origin: SettingsOrigin
    reason: str
    author_key_id: str | None
    tune_job_id: str | None = None
    reverted_to: int | None = None


def record_created(session: Session, kb: KnowledgeBase, author_key_id: str | None) -> SettingsVersion:
    """Version 1 of a new KB: the settings it was created with."""
    return _add(session, kb, 1, Change(SettingsOrigin.CREATE, "created", author_key_id))


def change_retrieval(
    session: Session, kb: KnowledgeBase, retrieval: dict[str, Any], change: Change, *, even_if_same: bool = False
) -> SettingsVersion | None:
    """Store `retrieval` (the KB's stored form) on the KB as its next version; None, and nothing recorded, when
    it equals the current settings (unless `even_if_same`: a revert is recorded whatever it brings back)."""
    if retrieval == kb.retrieval and not even_if_same:
        return None
    latest = current_version(session, kb.id)
    if latest is None:
        # A KB made before versions were recorded everywhere (a restore of an old backup): its present settings
        # become version 1 first, so that this change can be reverted.
        _add(session, kb, 1, Change(SettingsOrigin.INITIAL, FIRST_VERSION_REASON, None))
        latest = 1
    kb.retrieval = retrieval
    return _add(session, kb, latest + 1, change)


def current_version(session: Session, kb_id: str) -> int | None:
    """The number of the KB's newest version (None: none recorded)."""
    return session.scalar(select(func.max(SettingsVersion.version)).where(SettingsVersion.kb_id == kb_id))


def load_version(session: Session, kb_id: str, version: int) -> SettingsVersion:
    found = session.scalars(
        select(SettingsVersion).where(SettingsVersion.kb_id == kb_id, SettingsVersion.version == version)
    ).first()
    if found is None:
        raise NotFound(f"knowledge base {kb_id} has no settings version {version}", version=version)
    return found


def list_versions(session: Session, kb_id: str, limit: int, offset: int) -> tuple[list[SettingsVersion], int]:
    """A page of the KB's versions, newest first, and how many it has."""
    where = SettingsVersion.kb_id == kb_id
    total = session.scalar(select(func.count()).select_from(SettingsVersion).where(where)) or 0
    query = select(SettingsVersion).where(where).order_by(SettingsVersion.version.desc())
    return list(session.scalars(query.limit(limit).offset(offset))), total


def _add(session: Session, kb: KnowledgeBase, number: int, change: Change) -> SettingsVersion:
    version = SettingsVersion(
        kb_id=kb.id,
        version=number,
        retrieval=dict(kb.retrieval or {}),
        origin=change.origin,
        reason=change.reason,
        author_key_id=change.author_key_id,
        tune_job_id=change.tune_job_id,
        reverted_to=change.reverted_to,
    )
    session.add(version)
    session.flush()
    return version
