"""The metadata store and the worker's claim/lease/finish protocol, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine, create_engine, inspect, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.ids import new_id
from ragkb_core.kb_settings import KbAnalyzer, KbChunking
from ragkb_core.settings import DatabaseSettings
from ragkb_store.db.engine import build_engine, migrate_to, migrate_to_head, transaction
from ragkb_store.db.models import Base, Document, Job, JobItem, KnowledgeBase, utcnow
from ragkb_store.ledger import DocumentLedger
from ragkb_store.progress import refresh_job
from ragkb_store.reindexing import IndexState, ReindexTarget
from ragkb_store.states import DocumentStatus, JobStatus
from tests.conftest import POSTGRES_ADMIN_URL

pytestmark = pytest.mark.integration


def add_kb(sessions: sessionmaker[Session]) -> str:
    kb_id = new_id()
    with transaction(sessions) as session:
        session.add(KnowledgeBase(id=kb_id, name=f"kb-{kb_id}", embedding_model="m", analyzer_version="a"))
    return kb_id


def add_document(sessions: sessionmaker[Session], kb_id: str, source_id: str = "a.md") -> str:
    document_id = new_id()
    with transaction(sessions) as session:
        session.add(
            Document(
                id=document_id,
                kb_id=kb_id,
                source_id=source_id,
                title="A",
                media_type="text/markdown",
                size_bytes=3,
                blob_sha256="0" * 64,
                labels=["hr"],
                metadata_={"lang": "ja"},
                version=1,
            )
        )
    return document_id


def test_migrations_create_every_table_and_run_twice(database_url: str) -> None:
    engine = build_engine(DatabaseSettings(url=database_url))
    migrate_to_head(engine)
    migrate_to_head(engine)
    assert {"knowledge_bases", "documents", "jobs", "alembic_version"} <= set(inspect(engine).get_table_names())
    engine.dispose()


def test_migrations_create_every_index_the_models_declare(database_url: str) -> None:
    engine = build_engine(DatabaseSettings(url=database_url))
    migrate_to_head(engine)
    inspector = inspect(engine)
    for table in Base.metadata.sorted_tables:
        declared = {index.name for index in table.indexes}
        assert declared <= {index["name"] for index in inspector.get_indexes(table.name)}, table.name
    engine.dispose()


@pytest.mark.parametrize(
    ("lookup", "index"),
    [
        # A batch's claim and finish mark its documents' open ingest jobs.
        (
            "UPDATE jobs SET status = 'running' WHERE document_id IN ('a', 'b') AND kind = 'ingest' "
            "AND status IN ('queued', 'running')",
            "ix_jobs_document",
        ),
        # The sweeper, every 30 s, across KBs.
        ("SELECT id FROM documents WHERE status = 'processing' AND lease_until < '2026-01-01'", "ix_documents_status"),
        ("SELECT id FROM documents WHERE status = 'pending' AND updated_at < '2026-01-01'", "ix_documents_status"),
        (
            "SELECT id FROM jobs WHERE status IN ('queued', 'running') AND kind != 'ingest' AND created_at < '2026'",
            "ix_jobs_status",
        ),
    ],
)
def test_the_ledgers_lookups_go_through_an_index_not_every_row(database_url: str, lookup: str, index: str) -> None:
    """The jobs and documents tables hold a row per upload ever made: SQLite's plan said SCAN for each of these
    before migration 0018."""
    if not database_url.startswith("sqlite"):
        pytest.skip("the plan is read from SQLite's EXPLAIN QUERY PLAN; PostgreSQL plans by its statistics")
    engine = build_engine(DatabaseSettings(url=database_url))
    migrate_to_head(engine)
    with engine.connect() as connection:
        plan = " ".join(str(row[-1]) for row in connection.execute(text("EXPLAIN QUERY PLAN " + lookup)))
    assert index in plan and "SCAN" not in plan, plan
    engine.dispose()


def test_json_fields_round_trip(sessions: sessionmaker[Session]) -> None:
    document_id = add_document(sessions, add_kb(sessions))
    with sessions() as session:
        document = session.get_one(Document, document_id)
        assert document.labels == ["hr"]
        assert document.metadata_ == {"lang": "ja"}
        assert document.status == DocumentStatus.PENDING


def test_source_id_is_unique_within_a_kb_only(sessions: sessionmaker[Session]) -> None:
    kb_a, kb_b = add_kb(sessions), add_kb(sessions)
    add_document(sessions, kb_a, "same.md")
    add_document(sessions, kb_b, "same.md")
    with pytest.raises(IntegrityError):
        add_document(sessions, kb_a, "same.md")


def test_deleting_a_kb_cascades_to_its_documents(sessions: sessionmaker[Session]) -> None:
    kb_id = add_kb(sessions)
    add_document(sessions, kb_id)
    with transaction(sessions) as session:
        session.delete(session.get_one(KnowledgeBase, kb_id))
    with sessions() as session:
        assert session.scalars(select(Document).where(Document.kb_id == kb_id)).all() == []


def test_a_document_is_claimed_once(sessions: sessionmaker[Session]) -> None:
    document_id = add_document(sessions, add_kb(sessions))
    ledger = DocumentLedger(sessions, lease_s=60)
    claim = ledger.claim(document_id)
    assert claim is not None and claim.version == 1 and claim.attempt == 1
    assert ledger.claim(document_id) is None


def test_a_claim_carries_its_kbs_analyzer(sessions: sessionmaker[Session]) -> None:
    kb_id = add_kb(sessions)
    default_claim = DocumentLedger(sessions, lease_s=60).claim(add_document(sessions, kb_id))
    assert default_claim is not None and default_claim.analyzer == KbAnalyzer()  # the row's {} is the default
    with transaction(sessions) as session:
        session.get_one(KnowledgeBase, kb_id).analyzer = {"char_bigrams": True}
    claim = DocumentLedger(sessions, lease_s=60).claim(add_document(sessions, kb_id, "b.md"))
    assert claim is not None and claim.analyzer == KbAnalyzer(char_bigrams=True)


def test_an_expired_lease_can_be_taken_over(sessions: sessionmaker[Session]) -> None:
    document_id = add_document(sessions, add_kb(sessions))
    ledger = DocumentLedger(sessions, lease_s=60)
    assert ledger.claim(document_id) is not None
    expire_lease(sessions, document_id)
    assert ledger.release_expired_leases() == [document_id]
    second = ledger.claim(document_id)
    assert second is not None and second.attempt == 2


def test_finish_of_a_superseded_version_is_refused(sessions: sessionmaker[Session]) -> None:
    document_id = add_document(sessions, add_kb(sessions))
    ledger = DocumentLedger(sessions, lease_s=60)
    claim = ledger.claim(document_id)
    assert claim is not None
    with transaction(sessions) as session:
        session.execute(update(Document).where(Document.id == document_id).values(version=2))
    assert ledger.finish(claim, 3, {}, {}) is False
    assert ledger.renew(claim) is None
    with sessions() as session:
        assert session.get_one(Document, document_id).indexed_version is None


def test_finish_makes_the_version_live(sessions: sessionmaker[Session]) -> None:
    document_id = add_document(sessions, add_kb(sessions))
    ledger = DocumentLedger(sessions, lease_s=60)
    claim = ledger.claim(document_id)
    assert claim is not None
    assert ledger.finish(claim, 7, {"embed": 0.5}, {"chunks": 7})
    with sessions() as session:
        document = session.get_one(Document, document_id)
        assert (document.status, document.indexed_version, document.chunk_count) == ("done", 1, 7)
        assert document.stage_timings == {"embed": 0.5}
        assert ledger.claim(document_id) is None


def test_failure_records_the_reason(sessions: sessionmaker[Session]) -> None:
    document_id = add_document(sessions, add_kb(sessions))
    ledger = DocumentLedger(sessions, lease_s=60)
    claim = ledger.claim(document_id)
    assert claim is not None
    ledger.fail(claim, "the text cannot be decoded")
    with sessions() as session:
        document = session.get_one(Document, document_id)
        assert (document.status, document.error) == ("failed", "the text cannot be decoded")


def test_pending_documents_past_their_age_are_found(sessions: sessionmaker[Session]) -> None:
    document_id = add_document(sessions, add_kb(sessions))
    with transaction(sessions) as session:
        session.execute(
            update(Document).where(Document.id == document_id).values(updated_at=utcnow() - timedelta(hours=1))
        )
    ledger = DocumentLedger(sessions, lease_s=60)
    assert ledger.pending_older_than(timedelta(minutes=5)) == [document_id]
    assert ledger.pending_older_than(timedelta(hours=2)) == []


def expire_lease(sessions: sessionmaker[Session], document_id: str) -> None:
    with transaction(sessions) as session:
        session.execute(
            update(Document).where(Document.id == document_id).values(lease_until=utcnow() - timedelta(seconds=1))
        )


def test_upgrading_an_old_schema_keeps_every_document(fresh_url: str) -> None:
    """Migrations that rebuild the KB table must never cascade into documents (SQLite copies and drops)."""
    engine = build_engine(DatabaseSettings(url=fresh_url))
    migrate_to(engine, "0001")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO knowledge_bases (id, name, description, embedding_model, analyzer_version, created_at,"
                " updated_at) VALUES ('kb1', 'old', '', 'm', 'a', '2026-01-01', '2026-01-01')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO documents (id, kb_id, source_id, title, media_type, size_bytes, blob_sha256, labels,"
                " metadata, doc_type, status, version, chunk_count, attempts, stage_timings, ingest_report,"
                " created_at, updated_at) VALUES ('d1', 'kb1', 's', 't', 'text/plain', 1, 'x', '[]', '{}',"
                " 'knowledge', 'done', 1, 3, 1, '{}', '{}', '2026-01-01', '2026-01-01')"
            )
        )
    migrate_to_head(engine)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM documents WHERE kb_id = 'kb1'")).scalar() == 1
        chunking = connection.execute(text("SELECT chunking FROM knowledge_bases WHERE id = 'kb1'")).scalar()
        # The defaults, but for the passage precision it has always had (migration 0016).
        assert _json(chunking) == {"passage_precision": "float32"}
        if connection.dialect.name == "sqlite":
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
    with engine.begin() as connection:  # PostgreSQL's database is shared by the session's tests
        connection.execute(text("DELETE FROM documents WHERE kb_id = 'kb1'"))
        connection.execute(text("DELETE FROM knowledge_bases WHERE id = 'kb1'"))
    engine.dispose()


def insert_kb(engine: Engine, kb_id: str, chunking: str = "{}", analyzer: str = "{}", index_state: str = "{}") -> None:
    """A KB row as a schema from 0015 on holds it, with these JSON texts (the other settings empty)."""
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO knowledge_bases (id, name, description, embedding_model, analyzer_version, chunking,"
                " retrieval, analyzer, sync, index_state, created_at, updated_at) VALUES (:id, :name, '', 'm', 'a',"
                " :chunking, '{}', :analyzer, '{}', :index_state, '2026-01-01', '2026-01-01')"
            ),
            {"id": kb_id, "name": f"old-{kb_id}", "chunking": chunking, "analyzer": analyzer}
            | {"index_state": index_state},
        )


def test_upgrading_to_0016_keeps_existing_kbs_passages_in_float32(fresh_url: str) -> None:
    engine = build_engine(DatabaseSettings(url=fresh_url))
    migrate_to(engine, "0015")
    chunking = '{"target_tokens": 128, "max_tokens": 200, "overlap_tokens": 32, "noise_patterns": [], "ocr": false}'
    insert_kb(engine, "kb16", chunking=chunking)
    migrate_to_head(engine)
    with engine.begin() as connection:
        stored = connection.execute(text("SELECT chunking FROM knowledge_bases WHERE id = 'kb16'")).scalar()
        connection.execute(text("DELETE FROM knowledge_bases WHERE id = 'kb16'"))
    engine.dispose()
    assert _json(stored) == {**json.loads(chunking), "passage_precision": "float32"}
    assert KbChunking.model_validate(_json(stored)).passage_precision == "float32"
    assert KbChunking().passage_precision == "auto"  # what a KB created now gets


def test_upgrading_to_0017_keeps_the_bm25_weights_existing_kbs_were_indexed_with(fresh_url: str) -> None:
    """Every index built before k1 and b were set per KB was weighted with Lucene's 1.2 and 0.75: the KB, its
    rollback target and a re-index job under way go on saying so, and their analyzer version stamps do not change."""
    engine = build_engine(DatabaseSettings(url=fresh_url))
    migrate_to(engine, "0016")
    analyzer = '{"words": "unicode", "languages": ["english"], "title_weight": 2}'
    previous = f'{{"previous_settings": {{"chunking": {{}}, "analyzer": {analyzer}, "embedding_model": "m"}}}}'
    insert_kb(engine, "kb17", analyzer=analyzer, index_state=previous)
    migrate_to_head(engine)
    with engine.begin() as connection:
        row = connection.execute(text("SELECT analyzer, index_state FROM knowledge_bases WHERE id = 'kb17'")).one()
        connection.execute(text("DELETE FROM knowledge_bases WHERE id = 'kb17'"))
    engine.dispose()
    stored, state = _json(row[0]), _json(row[1])
    assert stored == {**json.loads(analyzer), "bm25_k1": 1.2, "bm25_b": 0.75}
    assert state["previous_settings"]["analyzer"] == stored  # type: ignore[index]
    before = KbAnalyzer.model_validate(stored)
    assert before.version == "sudachi-c-norm+uax29-fold-stop-english+title2/2+cjk-bigram"  # the stamp it had
    assert (KbAnalyzer().bm25_k1, KbAnalyzer().bm25_b) == (0.9, 0.6)  # what a KB created now gets
    assert KbAnalyzer().version != before.version


def _json(value: object) -> object:
    """A JSON column as read by a raw statement: text on SQLite, already decoded on PostgreSQL."""
    return json.loads(value) if isinstance(value, str) else value


def test_upgrading_to_0006_gives_existing_kbs_the_default_sync_rules(database_url: str) -> None:
    engine = build_engine(DatabaseSettings(url=database_url))
    migrate_to(engine, "0005")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO knowledge_bases (id, name, description, embedding_model, analyzer_version, chunking,"
                " retrieval, analyzer, created_at, updated_at)"
                " VALUES ('kb6', 'old6', '', 'm', 'a', '{}', '{}', '{}', '2026-01-01', '2026-01-01')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO documents (id, kb_id, source_id, title, media_type, size_bytes, blob_sha256, labels,"
                " metadata, doc_type, status, version, chunk_count, attempts, stage_timings, ingest_report,"
                " created_at, updated_at) VALUES ('d6', 'kb6', 's', 't', 'text/plain', 1, 'x', '[]', '{}',"
                " 'knowledge', 'done', 1, 3, 1, '{}', '{}', '2026-01-01', '2026-01-01')"
            )
        )
    migrate_to_head(engine)
    assert "job_items" in inspect(engine).get_table_names()
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM documents WHERE kb_id = 'kb6'")).scalar() == 1
        assert connection.execute(text("SELECT sync FROM knowledge_bases WHERE id = 'kb6'")).scalar() in ("{}", {})
    with engine.begin() as connection:  # PostgreSQL's database is shared by the session's tests
        connection.execute(text("DELETE FROM documents WHERE kb_id = 'kb6'"))
        connection.execute(text("DELETE FROM knowledge_bases WHERE id = 'kb6'"))
    engine.dispose()


@pytest.fixture
def unmigrated_url(database_url: str) -> Iterator[str]:
    """A database no test has migrated yet: the session's PostgreSQL one is already at head."""
    if not database_url.startswith("postgresql"):
        yield database_url
        return
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"ragkb_test_{new_id()[:8]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def test_upgrading_to_0010_keeps_every_stored_analyzer_at_version_1(unmigrated_url: str) -> None:
    """KBs built before analyzer version 2 must go on being searched with the terms their index holds."""
    engine = build_engine(DatabaseSettings(url=unmigrated_url))
    migrate_to(engine, "0009")
    built = {"japanese": "sudachi", "sudachi_mode_a_subwords": False, "char_bigrams": True}
    previous = {"chunking": {}, "analyzer": {**built, "char_bigrams": False}, "embedding_model": None}
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO knowledge_bases (id, name, description, embedding_model, analyzer_version, chunking,"
                " retrieval, analyzer, sync, index_state, created_at, updated_at) VALUES ('kb10', 'old10', '', 'm',"
                " 'sudachi-c-norm+latin-lower/1+cjk-bigram', '{}', '{}', :analyzer, '{}', :state, '2026-01-01',"
                " '2026-01-01')"
            ),
            {
                "analyzer": json.dumps(built),
                "state": json.dumps({"previous_generation": 1, "previous_settings": previous}),
            },
        )
        connection.execute(
            text(
                "INSERT INTO jobs (id, kind, kb_id, status, progress_current, progress_total, counts, errors, params,"
                " created_at) VALUES ('job10', 'reindex', 'kb10', 'running', 0, 0, '{}', '[]', :params, '2026-01-01')"
            ),
            {
                "params": json.dumps(
                    {"generation": 3, "settings": {"chunking": {}, "analyzer": {"japanese": "char-bigram"}}}
                )
            },
        )
    migrate_to_head(engine)
    with sessionmaker(engine)() as session:
        kb = session.get_one(KnowledgeBase, "kb10")
        assert KbAnalyzer.model_validate(kb.analyzer).version == kb.analyzer_version
        state = IndexState.model_validate(kb.index_state)
        assert state.previous_settings is not None
        assert state.previous_settings.analyzer.version == "sudachi-c-norm+latin-lower/1"
        target = ReindexTarget.model_validate(session.get_one(Job, "job10").params)
        assert target.settings.analyzer.version == "cjk-bigram+latin-lower/1"
    assert KbAnalyzer().words == "unicode"  # while a KB created now gets version 2
    engine.dispose()


def add_sync_job(sessions: sessionmaker[Session], kb_id: str, source_id: str = "a.md") -> str:
    job_id = new_id()
    with transaction(sessions) as session:
        session.add(Job(id=job_id, kind="sync", kb_id=kb_id, status=JobStatus.RUNNING, counts={}, errors=[]))
        session.flush()
        session.add(JobItem(job_id=job_id, kb_id=kb_id, source_id=source_id, action="upload", sha256="0" * 64))
    return job_id


def job_state(sessions: sessionmaker[Session], job_id: str) -> tuple[str, list[tuple[str, str | None]]]:
    with sessions() as session:
        items = session.scalars(select(JobItem).where(JobItem.job_id == job_id)).all()
        return session.get_one(Job, job_id).status, [(item.status, item.message) for item in items]


def test_a_sync_job_finishes_when_the_worker_indexes_its_last_document(sessions: sessionmaker[Session]) -> None:
    kb_id = add_kb(sessions)
    job_id = add_sync_job(sessions, kb_id)
    ledger = DocumentLedger(sessions, lease_s=60)
    claim = ledger.claim(add_document(sessions, kb_id))
    assert claim is not None and job_state(sessions, job_id)[0] == "running"
    assert ledger.finish(claim, 1, {}, {})
    assert job_state(sessions, job_id) == ("succeeded", [("done", None)])


def test_a_sync_job_records_the_reason_a_document_failed(sessions: sessionmaker[Session]) -> None:
    kb_id = add_kb(sessions)
    job_id = add_sync_job(sessions, kb_id)
    ledger = DocumentLedger(sessions, lease_s=60)
    claim = ledger.claim(add_document(sessions, kb_id))
    assert claim is not None
    ledger.fail(claim, "the text cannot be decoded")
    assert job_state(sessions, job_id) == ("failed", [("failed", "the text cannot be decoded")])


def test_an_upload_that_never_arrives_fails_at_the_deadline(sessions: sessionmaker[Session]) -> None:
    job_id = add_sync_job(sessions, add_kb(sessions), "never.md")
    with transaction(sessions) as session:
        refresh_job(session, session.get_one(Job, job_id), upload_wait_s=60)
    assert job_state(sessions, job_id)[0] == "running"
    with transaction(sessions) as session:
        refresh_job(session, session.get_one(Job, job_id), upload_wait_s=60, now=utcnow() + timedelta(seconds=61))
    status, [(item_status, message)] = job_state(sessions, job_id)
    assert (status, item_status) == ("failed", "failed") and message is not None and "never uploaded" in message
