"""Versions of a KB's retrieval settings on real SQLite and PostgreSQL: migration 0014 starts every existing KB's
history with its settings, each change takes the next number, a revert is a version of its own."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from ragkb_core.settings import DatabaseSettings
from ragkb_store.db.engine import build_engine, build_session_factory, migrate_to, migrate_to_head, transaction
from ragkb_store.db.models import KnowledgeBase, SettingsVersion
from ragkb_store.settings_versions import Change, change_retrieval, current_version, list_versions, record_created
from ragkb_store.states import SettingsOrigin

pytestmark = pytest.mark.integration


def test_the_migration_makes_each_existing_kbs_settings_its_version_1(fresh_url: str) -> None:
    engine = build_engine(DatabaseSettings(url=fresh_url))
    migrate_to(engine, "0013")
    with engine.begin() as connection:
        for kb_id, retrieval in (("kb1", '{"fusion": "rrf"}'), ("kb2", "{}")):
            connection.execute(
                text(
                    "INSERT INTO knowledge_bases (id, name, description, embedding_model, analyzer_version, chunking,"
                    " retrieval, analyzer, sync, index_state, created_at, updated_at)"
                    f" VALUES ('{kb_id}', '{kb_id}', '', 'm', 'a', '{{}}', '{retrieval}', '{{}}', '{{}}', '{{}}',"
                    " '2026-01-01', '2026-01-01')"
                )
            )
    migrate_to_head(engine)
    sessions = build_session_factory(engine)
    with sessions() as session:
        rows = {row.kb_id: row for row in session.query(SettingsVersion)}
    assert set(rows) == {"kb1", "kb2"}
    assert rows["kb1"].version == 1 and rows["kb1"].origin == "migration" and rows["kb1"].retrieval == {"fusion": "rrf"}
    assert rows["kb2"].retrieval == {}
    engine.dispose()


def test_changes_are_numbered_recorded_only_when_they_change_something_and_unique(fresh_url: str) -> None:
    engine = build_engine(DatabaseSettings(url=fresh_url))
    migrate_to_head(engine)
    sessions = build_session_factory(engine)
    patch = Change(SettingsOrigin.PATCH, "rrf for this KB", "key1")
    with transaction(sessions) as session:
        kb = KnowledgeBase(id="kb1", name="kb1", embedding_model="m", analyzer_version="a", retrieval={})
        session.add(kb)
        session.flush()
        record_created(session, kb, "key0")
        assert change_retrieval(session, kb, {"fusion": "rrf"}, patch) is not None
        assert change_retrieval(session, kb, {"fusion": "rrf"}, patch) is None  # the same: nothing recorded
        back = Change(SettingsOrigin.REVERT, "back", "key1", reverted_to=1)
        assert change_retrieval(session, kb, {}, back, even_if_same=True) is not None
    with sessions() as session:
        rows, total = list_versions(session, "kb1", limit=10, offset=0)
        assert total == 3 and current_version(session, "kb1") == 3
        assert [(row.version, row.origin, row.retrieval) for row in rows] == [
            (3, "revert", {}),
            (2, "patch", {"fusion": "rrf"}),
            (1, "create", {}),
        ]
        assert rows[1].author_key_id == "key1" and rows[2].author_key_id == "key0" and rows[0].reverted_to == 1
    with pytest.raises(IntegrityError), transaction(sessions) as session:
        session.add(SettingsVersion(kb_id="kb1", version=3, retrieval={}, origin="patch", reason=""))
    engine.dispose()


def test_a_kb_without_history_gets_its_present_settings_as_version_1_before_its_first_change(fresh_url: str) -> None:
    engine = build_engine(DatabaseSettings(url=fresh_url))
    migrate_to_head(engine)
    sessions = build_session_factory(engine)
    with transaction(sessions) as session:
        kb = KnowledgeBase(id="kb2", name="kb2", embedding_model="m", analyzer_version="a", retrieval={"top_k": 5})
        session.add(kb)
        session.flush()
        made = change_retrieval(session, kb, {"top_k": 8}, Change(SettingsOrigin.TUNE, "tuned", "key", "job1"))
        assert made is not None and made.version == 2 and made.tune_job_id == "job1"
    with sessions() as session:
        rows, _ = list_versions(session, "kb2", limit=10, offset=0)
        assert [(row.version, row.origin, row.retrieval) for row in rows] == [
            (2, "tune", {"top_k": 8}),
            (1, "initial", {"top_k": 5}),
        ]
    engine.dispose()
