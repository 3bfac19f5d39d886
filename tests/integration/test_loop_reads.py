"""The reads every search makes, on the event loop where that is safe (ragkb_api.loop_reads): on a real SQLite
file they run on the loop's own thread, a lock another connection holds sends them to a worker thread without
blocking the loop, and on a real PostgreSQL they always run in a worker thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from ragkb_api.loop_reads import LoopReads
from ragkb_core.settings import DatabaseSettings
from ragkb_store.db.engine import build_engine

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
    # A connection that holds the file exclusively (as a maintenance tool may): WAL readers cannot read past it.
    holder = sqlite3.connect(sqlite_file, isolation_level=None, check_same_thread=False)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO t VALUES (4)")
    holder.execute("COMMIT")
    releaser = threading.Timer(LOCK_HELD_S, holder.close)
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
