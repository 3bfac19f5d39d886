"""Fixtures of the integration tests that talk to the metadata database (SQLite and PostgreSQL, see
tests/conftest.py's `database_url`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from qdrant_client import QdrantClient
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.ids import new_id
from ragkb_core.settings import QdrantSettings
from ragkb_retriever.index.edge import EdgeIndex
from ragkb_retriever.index.server import ServerIndex
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import KnowledgeBase
from ragkb_store.ledger import DocumentLedger
from tests.conftest import fresh_postgres_database
from tests.support.in_process import migrated_sessions


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of its own, for a migration test that starts below head (`database_url`'s PostgreSQL
    database is shared by the session's tests, and at head after the first)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ragkb.db'}"
        return
    yield from fresh_postgres_database("ragkb_migrate_")


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


# The two index adapters, empty: Qdrant Edge in a temporary folder (no optimisation while a test writes) and a
# Qdrant server's API on qdrant-client's local mode.
@pytest.fixture
def edge(tmp_path: Path) -> Iterator[EdgeIndex]:
    index = EdgeIndex(QdrantSettings(path=tmp_path / "index", optimize_after_points=100_000))
    yield index
    index.close()


@pytest.fixture
def server() -> Iterator[ServerIndex]:
    index = ServerIndex(QdrantClient(location=":memory:"))
    yield index
    index.close()
