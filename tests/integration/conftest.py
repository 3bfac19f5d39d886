"""Fixtures of the integration tests that talk to the metadata database (SQLite and PostgreSQL, see
tests/conftest.py's `database_url`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.ids import new_id
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import KnowledgeBase
from ragkb_store.ledger import DocumentLedger
from tests.support.in_process import migrated_sessions


@pytest.fixture
def sessions(database_url: str) -> Iterator[sessionmaker[Session]]:
    """A migrated database of each kind, empty."""
    with migrated_sessions(database_url) as factory:
        yield factory


@pytest.fixture
def ledger(sessions: sessionmaker[Session]) -> DocumentLedger:
    return DocumentLedger(sessions, lease_s=60)


@pytest.fixture
def kb_id(sessions: sessionmaker[Session]) -> str:
    """A knowledge base row, for the ledger's documents to belong to."""
    kb_id = new_id()
    with transaction(sessions) as session:
        session.add(KnowledgeBase(id=kb_id, name=f"kb-{kb_id}", embedding_model="m", analyzer_version="a"))
    return kb_id
