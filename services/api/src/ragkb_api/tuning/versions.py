"""The versions of a KB's retrieval settings: list them, and bring one back as a new version."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.paging import Page, PageRequest
from ragkb_api.tuning.schemas import SettingsVersionOut
from ragkb_core.kb_settings import KbRetrieval
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import SettingsVersion
from ragkb_store.knowledge_bases import ensure_not_deleting, load_kb, lock_kb
from ragkb_store.settings_versions import Change, change_retrieval, current_version, list_versions, load_version
from ragkb_store.states import SettingsOrigin


class SettingsVersionService:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def list(self, kb_id: str, page: PageRequest) -> Page[SettingsVersionOut]:
        """A page of the KB's versions, newest first."""
        with self._sessions() as session:
            load_kb(session, kb_id)
            rows, total = list_versions(session, kb_id, page.limit, page.offset)
            latest = current_version(session, kb_id)
            return Page([version_out(row, latest) for row in rows], total, page)

    def revert(self, kb_id: str, version: int, author_key_id: str, reason: str | None) -> SettingsVersionOut:
        """The settings of `version` as the KB's new, newest version (recorded even when they are the current
        ones: the history says a revert happened)."""
        with transaction(self._sessions) as session:
            kb = lock_kb(session, kb_id)
            ensure_not_deleting(kb)
            wanted = load_version(session, kb_id, version)
            change = Change(
                SettingsOrigin.REVERT, reason or f"revert to version {version}", author_key_id, reverted_to=version
            )
            made = change_retrieval(session, kb, dict(wanted.retrieval), change, even_if_same=True)
            assert made is not None  # even_if_same: always recorded
            return version_out(made, made.version)


def version_out(row: SettingsVersion, latest: int | None) -> SettingsVersionOut:
    return SettingsVersionOut(
        knowledge_base_id=row.kb_id,
        version=row.version,
        retrieval=KbRetrieval.model_validate(row.retrieval),
        origin=SettingsOrigin(row.origin),
        reason=row.reason,
        author_key_id=row.author_key_id,
        tune_job_id=row.tune_job_id,
        reverted_to=row.reverted_to,
        current=row.version == latest,
        created_at=row.created_at,
    )
