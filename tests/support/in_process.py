"""Fixtures' building blocks that several integration test files share: a migrated metadata database that is
emptied afterwards, and the retriever's internal index routes served in-process to a real RetrieverClient."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from litestar import Litestar
from litestar.di import Provide
from litestar.testing import TestClient
from pydantic import SecretStr
from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import DatabaseSettings, RetrieverClientSettings
from ragkb_http import PROBLEM_HANDLERS, service_token_guard
from ragkb_retriever.indexing import IndexService
from ragkb_retriever.routes import IndexController
from ragkb_store.db.engine import build_engine, build_session_factory, migrate_to_head, transaction
from ragkb_store.db.models import Document, Job, JobItem, KnowledgeBase, Source


@contextmanager
def migrated_sessions(database_url: str) -> Iterator[sessionmaker[Session]]:
    engine = build_engine(DatabaseSettings(url=database_url))
    migrate_to_head(engine)
    factory = build_session_factory(engine)
    yield factory
    with transaction(factory) as session:  # PostgreSQL's database is shared by the session's tests
        session.execute(delete(JobItem))
        session.execute(delete(Job))
        session.execute(delete(Document))
        session.execute(delete(Source))
        session.execute(delete(KnowledgeBase))
    engine.dispose()


@contextmanager
def in_process_retriever(service: IndexService, token: str) -> Iterator[RetrieverClient]:
    """A RetrieverClient whose requests the retriever's index routes answer in this process."""
    app = Litestar(
        route_handlers=[IndexController],
        dependencies={
            "index_service": Provide(lambda: service, sync_to_thread=False),
            "search_service": Provide(lambda: None, sync_to_thread=False),
        },
        guards=[service_token_guard(token)],
        exception_handlers=PROBLEM_HANDLERS,
    )
    client = RetrieverClient(RetrieverClientSettings(url="http://testserver.local"), SecretStr(token))
    with TestClient(app, base_url="http://testserver.local") as http:
        http.headers.update(client._http.headers)
        client._http = http  # the client's own requests, answered by the app in-process
        yield client
