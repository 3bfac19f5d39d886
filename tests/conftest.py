"""Shared fixtures: the metadata database under test, on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

POSTGRES_ADMIN_URL = os.environ.get("RAGKB_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def fresh_postgres_database(prefix: str) -> Iterator[str]:
    """A new, empty PostgreSQL database named `prefix` + a random suffix, dropped afterwards (a generator for
    fixtures to yield from); skips the test when PostgreSQL does not answer."""
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        pytest.skip(f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}: {exc.orig}")
    yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped afterwards."""
    yield from fresh_postgres_database("ragkb_test_")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('db') / 'ragkb.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url
