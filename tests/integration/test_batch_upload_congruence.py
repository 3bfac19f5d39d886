"""A batch upload answers, stores and deletes exactly what its items sent one by one do (DocumentService on a real
database, blob store and broker, SQLite and PostgreSQL): the same results in the same order (refusals when read,
when checked and only when recorded after an earlier item; a repeated source_id; unchanged items), and the same
originals left in the blob store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import SecretStr
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.access import Caller
from ragkb_api.documents.routes import _prepared_or_error
from ragkb_api.documents.schemas import BatchItemResult
from ragkb_api.documents.service import DocumentService, PreparedUpload
from ragkb_core.errors import RagkbError
from ragkb_core.ids import new_id
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import JobSettings, LimitSettings, RedisSettings, RetrieverClientSettings
from ragkb_store.blobs import BlobStore, sha256_of
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import KnowledgeBase
from ragkb_store.ledger import DocumentLedger
from ragkb_store.queue import IngestQueue, make_celery
from tests.support.redis_db import HOST, PORT, private_redis_db

pytestmark = pytest.mark.integration

ADMIN = Caller(key_id="admin", role="admin")
SEEDS = [
    {"source_id": "rules", "text": "The rules.", "doc_type": "reference"},
    {"source_id": "old", "text": "An old note."},
    {"source_id": "replaced", "text": "A note about to change."},
]
ITEMS: list[Any] = [
    {"source_id": "a", "text": "First text of a."},
    {"source_id": "rules", "text": "New rules.", "doc_type": "reference"},  # a reference's content: refused
    {"source_id": "a", "text": "Second text of a."},  # the next version of item 0
    {"source_id": "a", "text": "Second text of a."},  # unchanged
    {"source_id": "b", "text": "A reference.", "doc_type": "reference", "labels": ["shared"]},
    {"source_id": "c", "text": "A note.", "labels": ["shared"]},  # a reference's label: refused after item 4
    {"source_id": "old", "text": "An old note."},  # unchanged
    {"source_id": "empty", "text": ""},  # refused when read
    "not a document",
    {"source_id": "replaced", "text": "First text of a."},  # the same original as item 0 (replaced there)
    {"source_id": "e", "text": "Only here.", "doc_type": "reference"},
    {"source_id": "e", "text": "Only here.", "doc_type": "knowledge"},  # refused after item 10
]


@pytest.fixture
def queue(sessions: sessionmaker[Session]) -> Iterator[IngestQueue]:
    try:
        redis.Redis(host=HOST, port=PORT).ping()
    except redis.ConnectionError as exc:
        pytest.skip(f"Redis is not reachable at {HOST}:{PORT}: {exc}")
    with private_redis_db() as broker:
        db = broker.connection_pool.connection_kwargs["db"]
        app = make_celery(RedisSettings(url=f"redis://{HOST}:{PORT}/{db}"))
        yield IngestQueue(app, DocumentLedger(sessions), fair=True)
        app.close()


def service_on(sessions: sessionmaker[Session], queue: IngestQueue, blobs: Path) -> DocumentService:
    retriever = RetrieverClient(RetrieverClientSettings(url="http://127.0.0.1:9"), SecretStr("unused"))
    return DocumentService(sessions, BlobStore(blobs), queue, retriever, limits=LimitSettings(), jobs=JobSettings())


def seeded_kb(sessions: sessionmaker[Session], service: DocumentService) -> str:
    kb_id = new_id()
    with transaction(sessions) as session:
        session.add(KnowledgeBase(id=kb_id, name=f"kb-{kb_id}", embedding_model="m", analyzer_version="a"))
    service.accept_batch(kb_id, [prepared(seed) for seed in SEEDS], ADMIN)
    return kb_id


def prepared(raw: Any) -> PreparedUpload | RagkbError:
    return _prepared_or_error(raw)


def one_by_one(service: DocumentService, kb_id: str) -> list[BatchItemResult]:
    """What a batch answered when each item was accepted on its own, in order."""
    results = []
    for index, raw in enumerate(ITEMS):
        item = prepared(raw)
        if isinstance(item, RagkbError):
            results.append(BatchItemResult(index=index, source_id=None, error=error_of(item)))
            continue
        fields, upload = item
        try:
            document = service.accept(kb_id, fields, upload, ADMIN)
        except RagkbError as exc:
            results.append(BatchItemResult(index=index, source_id=fields.source_id, error=error_of(exc)))
            continue
        results.append(BatchItemResult(index=index, source_id=fields.source_id, document=document))
    return results


def error_of(exc: RagkbError) -> dict[str, Any]:
    return {"status": exc.status, "title": exc.title, "detail": exc.detail, "errors": exc.extra.get("errors")}


def comparable(result: BatchItemResult) -> dict[str, Any]:
    """A result without what differs between two KBs: ids and times."""
    answer = result.model_dump(mode="json")
    if answer["document"] is not None:
        for volatile in ("id", "knowledge_base_id", "created_at", "updated_at"):
            answer["document"].pop(volatile)
    return answer


def originals(blobs: Path) -> set[str]:
    return {path.name for path in blobs.rglob("*") if path.is_file() and not path.name.startswith(".")}


def test_a_batch_answers_and_stores_what_its_items_sent_one_by_one_do(
    sessions: sessionmaker[Session], queue: IngestQueue, tmp_path: Path
) -> None:
    batched, single = (
        service_on(sessions, queue, tmp_path / "batched"),
        service_on(sessions, queue, tmp_path / "single"),
    )
    # One KB after the other: an original is deleted only when no document of either KB has it.
    answer = batched.accept_batch(seeded_kb(sessions, batched), [prepared(raw) for raw in ITEMS], ADMIN)
    expected = one_by_one(single, seeded_kb(sessions, single))

    assert [comparable(result) for result in answer.results] == [comparable(result) for result in expected]
    assert (answer.accepted, answer.failed) == (7, 5)
    assert originals(tmp_path / "batched") == originals(tmp_path / "single")
    # The refused note's original is gone; item 0's, replaced by item 2, stays for the document that has it.
    assert sha256_of(b"A note.") not in originals(tmp_path / "batched")
    assert sha256_of(b"First text of a.") in originals(tmp_path / "batched")
