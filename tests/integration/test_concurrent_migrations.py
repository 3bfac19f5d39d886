"""Several processes migrating one fresh PostgreSQL database at once (api replicas and the migration Job of a
Kubernetes rollout) all succeed: the migration is serialised by an advisory lock, and the others find it done."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from ragkb_core.settings import DatabaseSettings
from ragkb_store.db.engine import build_engine, migrate_to_head
from tests.conftest import POSTGRES_ADMIN_URL

pytestmark = pytest.mark.integration
MIGRATORS = 4


@pytest.fixture
def fresh_postgres() -> Iterator[str]:
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"ragkb_migrate_{uuid.uuid4().hex[:8]}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        pytest.skip(f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}: {exc.orig}")
    yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


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
