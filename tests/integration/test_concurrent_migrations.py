"""Several processes migrating one fresh PostgreSQL database at once (api replicas and the migration Job of a
Kubernetes rollout) all succeed: the migration is serialised by an advisory lock, and the others find it done."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import inspect, text

from ragkb_core.settings import DatabaseSettings
from ragkb_store.db.engine import build_engine, migrate_to_head
from tests.conftest import fresh_postgres_database

pytestmark = pytest.mark.integration
MIGRATORS = 4


@pytest.fixture
def fresh_postgres() -> Iterator[str]:
    yield from fresh_postgres_database("ragkb_migrate_")


def test_concurrent_migrations_of_a_fresh_database_all_succeed(fresh_postgres: str) -> None:
    engines = [build_engine(DatabaseSettings(url=fresh_postgres)) for _ in range(MIGRATORS)]
    try:
        with ThreadPoolExecutor(MIGRATORS) as pool:
            list(pool.map(migrate_to_head, engines))  # re-raises the first failure
        tables = set(inspect(engines[0]).get_table_names())
        assert {"alembic_version", "knowledge_bases", "documents"} <= tables
        with engines[0].connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM alembic_version")).scalar_one() == 1
    finally:
        for engine in engines:
            engine.dispose()
