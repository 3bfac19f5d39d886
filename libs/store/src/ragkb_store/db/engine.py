"""Engine and session factory, and schema migration to head (Alembic) at start-up."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import sqlalchemy
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.settings import DatabaseSettings

_MIGRATIONS = Path(__file__).parent / "migrations"
# The setting's values as SQLite's PRAGMA takes them (a fixed map: nothing from outside reaches the statement).
SQLITE_SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL"}


def build_engine(settings: DatabaseSettings) -> Engine:
    url = make_url(settings.url)
    if url.get_backend_name() == "sqlite":
        return _sqlite_engine(settings)
    # pool_timeout: a request waits at most this long for a pooled connection, then fails (503) instead
    # of queueing forever; connect_timeout: an unreachable server fails a connect in seconds, not minutes.
    return _create_engine(
        url,
        echo=settings.echo,
        pool_pre_ping=True,
        pool_timeout=settings.pool_timeout_s,
        connect_args={"connect_timeout": settings.connect_timeout_s},
    )


def _create_engine(url: sqlalchemy.URL, **options: Any) -> Engine:
    """`sqlalchemy.create_engine` looked up when called, not imported: OpenTelemetry's SQLAlchemy instrumentation
    (ragkb_telemetry.tracing, started in each process before its engines are built) replaces the module's
    function, and a name imported before that would build engines whose statements are never traced."""
    return sqlalchemy.create_engine(url, **options)


def _sqlite_engine(settings: DatabaseSettings) -> Engine:
    url = make_url(settings.url)
    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    # api and worker are separate processes writing one file: wait for locks instead of failing at once.
    engine = _create_engine(url, echo=settings.echo, connect_args={"timeout": 30})
    event.listen(engine, "connect", partial(_sqlite_pragmas, synchronous=settings.sqlite_synchronous))
    return engine


def _sqlite_pragmas(dbapi_connection: object, _record: object, *, synchronous: str = "full") -> None:
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    # WAL lets readers proceed while a writer commits; foreign keys make ON DELETE CASCADE work.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA synchronous={SQLITE_SYNCHRONOUS[synchronous]}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def lock_free_sqlite_reader(engine: Engine) -> Engine | None:
    """A second engine on `engine`'s SQLite file whose connections only read and never wait for a lock; None for
    any other database, or a SQLite one that another connection could not share (in memory, a URI).

    For reads made on an event loop (ragkb_api.loop_reads): in WAL mode a reader does not wait for writers, and
    where it would have to (a connection holding the file exclusively, `PRAGMA locking_mode=EXCLUSIVE`, as a
    maintenance tool may) this engine's read fails at once with "database is locked" (`waits_for_a_lock`)
    instead of blocking for the busy timeout."""
    url = engine.url
    database = url.database or ""
    if url.get_backend_name() != "sqlite" or database in {"", ":memory:"} or database.startswith("file:"):
        return None
    # timeout 0: sqlite3's busy timeout, so a lock another connection holds is refused at once.
    reader = _create_engine(url, echo=engine.echo, connect_args={"timeout": 0})
    event.listen(reader, "connect", _read_only_pragmas)
    return reader


def _read_only_pragmas(dbapi_connection: object, _record: object) -> None:
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA query_only=ON")
    cursor.close()


def waits_for_a_lock(error: OperationalError | sqlite3.OperationalError) -> bool:
    """Whether SQLite refused a statement because another connection holds a lock it would have waited for (an
    error of SQLAlchemy's, or of sqlite3's own for a statement run on its connection directly)."""
    code = getattr(getattr(error, "orig", error), "sqlite_errorcode", None)
    # The low byte: an extended code (SQLITE_BUSY_RECOVERY, SQLITE_BUSY_SNAPSHOT, …) is a kind of its primary one.
    return isinstance(code, int) and code & 0xFF in {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}


def database_answers(engine: Engine) -> bool:
    """Readiness: a round trip to the database."""
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    return True


def build_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def engine_of(sessions: sessionmaker[Session]) -> Engine:
    """The engine a session factory is bound to, for a hot-path read that needs no ORM session: one Core
    statement on a pooled connection costs ~0.3 ms where an ORM session, its query and its loaded objects
    cost ~1 ms (the api's per-search key and KB reads)."""
    engine: Engine = sessions.kw["bind"]
    return engine


@contextmanager
def transaction(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commits on success, rolls back on any error."""
    with sessions.begin() as session:
        yield session


# The PostgreSQL advisory lock that serialises migrations (any fixed number no other code uses).
MIGRATION_LOCK_ID = 0x7261676B62  # "ragkb"


def migrate_to_head(engine: Engine) -> None:
    migrate_to(engine, "head")


def migrate_to(engine: Engine, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            # SQLite alters a table by copying it and dropping the original; with foreign keys on, that DROP
            # cascades into every referencing row (a KB migration would delete all documents). The pragma
            # only takes effect outside a transaction, so it is set before the migration's one begins.
            _set_sqlite_foreign_keys(connection, enabled=False)
        try:
            with connection.begin():
                if connection.dialect.name == "postgresql":
                    # Replicas (and the migration Job) start together: one migrates, the others wait for its
                    # commit and then find the schema at head. Held until this transaction ends.
                    connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID})")
                config.attributes["connection"] = connection
                command.upgrade(config, revision)
        finally:
            if sqlite:
                _set_sqlite_foreign_keys(connection, enabled=True)


def _set_sqlite_foreign_keys(connection: Connection, *, enabled: bool) -> None:
    connection.exec_driver_sql(f"PRAGMA foreign_keys={'ON' if enabled else 'OFF'}")
    connection.commit()
