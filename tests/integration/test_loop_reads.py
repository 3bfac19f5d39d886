"""The reads every search makes, on the event loop where that is safe (ragkb_api.loop_reads): on a real SQLite
file they run on the loop's own thread, a lock another connection holds sends them to a worker thread without
blocking the loop, and on a real PostgreSQL they always run in a worker thread. The search's own statements read
on sqlite3 directly give the rows Core gives, and never keep a snapshot from one read to the next."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Engine, Integer, MetaData, Table, bindparam, event, select, text
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.keys.schemas import ApiKeyCreate
from ragkb_api.keys.service import _LIVE_KEY_BY_PREFIX, ApiKeyService
from ragkb_api.loop_reads import LoopReads
from ragkb_api.search.service import _SEARCHABLE_KBS
from ragkb_core.ids import new_id
from ragkb_core.settings import DatabaseSettings
from ragkb_store.db.engine import build_engine, build_session_factory, migrate_to_head
from ragkb_store.db.models import KnowledgeBase

pytestmark = pytest.mark.integration
COUNT = text("SELECT count(*) AS n FROM t WHERE x >= :least")
LOCK_HELD_S = 0.4


@pytest.fixture
def sqlite_file(tmp_path: Path) -> Path:
    path = tmp_path / "ragkb.db"
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("CREATE TABLE t (x INTEGER)")
    connection.executemany("INSERT INTO t VALUES (?)", [(1,), (2,), (3,)])
    connection.commit()
    connection.close()
    return path


@pytest.fixture
def reading_threads() -> Iterator[list[int]]:
    """The thread of every statement any engine executes meanwhile."""
    threads: list[int] = []

    def record(*_: Any) -> None:
        threads.append(threading.get_ident())

    event.listen(Engine, "before_cursor_execute", record)
    yield threads
    event.remove(Engine, "before_cursor_execute", record)


def _engine(url: str) -> Engine:
    return build_engine(DatabaseSettings(url=url))


def test_on_sqlite_a_read_runs_on_the_loops_own_thread(sqlite_file: Path, reading_threads: list[int]) -> None:
    reads = LoopReads(_engine(f"sqlite:///{sqlite_file}"))
    assert reads.on_the_loop

    async def read() -> tuple[int, int]:
        rows = await reads.rows(COUNT, {"least": 2})
        return rows[0].n, threading.get_ident()

    count, loop_thread = asyncio.run(read())
    assert count == 2
    assert reading_threads == [loop_thread]
    reads.dispose()


def test_a_locked_sqlite_file_sends_the_read_to_a_thread_and_the_loop_keeps_serving(
    sqlite_file: Path, reading_threads: list[int]
) -> None:
    releaser = _hold_exclusively(sqlite_file)
    reads = LoopReads(_engine(f"sqlite:///{sqlite_file}"))

    async def read_while_ticking() -> tuple[int, int, int, float]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.02)
                ticks += 1

        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        releaser.start()
        rows = await reads.rows(COUNT, {"least": 2})
        waited = time.monotonic() - started
        ticker.cancel()
        return rows[0].n, ticks, threading.get_ident(), waited

    count, ticks, loop_thread, waited = asyncio.run(read_while_ticking())
    assert count == 3  # the row the holder committed is read once it lets go
    assert waited >= LOCK_HELD_S * 0.9
    assert ticks >= 5  # the loop ran other work while the read waited
    assert reading_threads[0] == loop_thread  # tried on the loop, refused at once
    assert reading_threads[-1] != loop_thread  # then read in a worker thread
    reads.dispose()


def _hold_exclusively(sqlite_file: Path) -> threading.Timer:
    """A connection that holds the file exclusively (as a maintenance tool may), having written a 4th row: WAL
    readers cannot read past it. The timer it gives closes it LOCK_HELD_S after it is started."""
    holder = sqlite3.connect(sqlite_file, isolation_level=None, check_same_thread=False)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO t VALUES (4)")
    holder.execute("COMMIT")
    return threading.Timer(LOCK_HELD_S, holder.close)


def test_an_in_memory_sqlite_database_is_read_in_a_thread() -> None:
    # Another connection to ":memory:" would be another, empty database.
    assert not LoopReads(_engine("sqlite:///:memory:")).on_the_loop


def test_on_postgresql_a_read_never_blocks_the_loop(postgres_url: str, reading_threads: list[int]) -> None:
    engine = _engine(postgres_url)
    reads = LoopReads(engine)
    assert not reads.on_the_loop

    async def read() -> tuple[int, int]:
        rows = await reads.rows(text("SELECT 41 + :one AS n"), {"one": 1})
        return rows[0].n, threading.get_ident()

    answer, loop_thread = asyncio.run(read())
    assert answer == 42
    assert reading_threads and loop_thread not in reading_threads
    engine.dispose()


# -- the direct path: the search's own statements on sqlite3, the same rows as through Core --------------------


@pytest.fixture
def api_database(tmp_path: Path) -> Iterator[tuple[Engine, sessionmaker[Session]]]:
    engine = _engine(f"sqlite:///{tmp_path / 'api.db'}")
    migrate_to_head(engine)
    yield engine, build_session_factory(engine)
    engine.dispose()


def _add_kbs(sessions: sessionmaker[Session]) -> list[str]:
    """Three KBs whose rows differ where the reads convert: JSON settings, a deletion under way, an external KB."""
    own_fields: list[dict[str, Any]] = [
        {"name": "plain", "retrieval": {"top_k": 7, "hybrid": True}, "analyzer": {"languages": ["english"]}},
        {"name": "being deleted 削除中", "deletion_job_id": new_id()},
        {
            "name": "external",
            "external": {"kind": "qdrant", "url": "http://q:6333", "labels": ["a", "b"]},
            "external_credentials": "sealed",
        },
    ]
    ids = [new_id() for _ in own_fields]
    with sessions() as session, session.begin():
        session.add_all(
            KnowledgeBase(id=kb_id, embedding_model="e5", analyzer_version="2", **fields)
            for kb_id, fields in zip(ids, own_fields, strict=True)
        )
    return ids


def test_the_searchs_own_reads_give_the_same_rows_directly_as_through_core(
    api_database: tuple[Engine, sessionmaker[Session]], reading_threads: list[int]
) -> None:
    engine, sessions = api_database
    kb_ids = _add_kbs(sessions)
    key = ApiKeyService(sessions, None).create(ApiKeyCreate(name="k", role="client", grants={kb_ids[0]: "read"}))
    reads = LoopReads(engine)
    asked: list[tuple[Any, dict[str, Any]]] = [
        (_LIVE_KEY_BY_PREFIX, {"prefix": key.prefix}),
        (_LIVE_KEY_BY_PREFIX, {"prefix": "0" * len(key.prefix)}),  # no such key
        *((_SEARCHABLE_KBS, {"ids": ids}) for ids in ([kb_ids[0]], kb_ids, [*kb_ids[1:], new_id()], [new_id()])),
    ]

    async def direct() -> list[list[tuple[Any, ...]]]:
        return [[tuple(row) for row in await reads.rows(statement, params)] for statement, params in asked]

    through_core = [[tuple(row) for row in _core_rows(engine, statement, params)] for statement, params in asked]
    reading_threads.clear()
    assert asyncio.run(direct()) == through_core
    assert reading_threads == []  # none of them went through Core
    assert through_core[0][0][3] == {kb_ids[0]: "read"}  # JSON columns come back decoded, as through Core
    assert sorted(row[0] for row in through_core[3]) == sorted(kb_ids)

    async def fields() -> tuple[Any, Any]:
        key_row = (await reads.rows(_LIVE_KEY_BY_PREFIX, {"prefix": key.prefix}))[0]
        kb_row = (await reads.rows(_SEARCHABLE_KBS, {"ids": [kb_ids[2]]}))[0]
        return key_row.grants, kb_row.external

    assert asyncio.run(fields()) == (
        {kb_ids[0]: "read"},
        {"kind": "qdrant", "url": "http://q:6333", "labels": ["a", "b"]},
    )
    reads.dispose()


def test_a_direct_read_sees_what_another_connection_committed_since_the_last_one(
    api_database: tuple[Engine, sessionmaker[Session]],
) -> None:
    engine, sessions = api_database
    keys = ApiKeyService(sessions, None)
    key = keys.create(ApiKeyCreate(name="k", role="admin"))
    reads = LoopReads(engine)

    async def live() -> int:
        return len(await reads.rows(_LIVE_KEY_BY_PREFIX, {"prefix": key.prefix}))

    async def scenario() -> tuple[int, int]:
        before = await live()
        keys.revoke(key.id)  # committed by the service's own connection
        return before, await live()

    assert asyncio.run(scenario()) == (1, 0)  # no snapshot of the first read carried into the second
    reads.dispose()


def test_a_locked_sqlite_file_sends_a_direct_read_to_a_thread(sqlite_file: Path) -> None:
    releaser = _hold_exclusively(sqlite_file)
    reads = LoopReads(_engine(f"sqlite:///{sqlite_file}"))
    table = Table("t", MetaData(), Column("x", Integer))
    at_least = select(table.c.x).where(table.c.x >= bindparam("least"))

    async def read() -> tuple[list[int], float]:
        started = time.monotonic()
        releaser.start()
        rows = await reads.rows(at_least, {"least": 2})
        return sorted(row.x for row in rows), time.monotonic() - started

    found, waited = asyncio.run(read())
    assert found == [2, 3, 4] and waited >= LOCK_HELD_S * 0.9
    reads.dispose()


def _core_rows(engine: Engine, statement: Any, params: dict[str, Any]) -> list[Any]:
    with engine.connect() as connection:
        return list(connection.execute(statement, params).all())
