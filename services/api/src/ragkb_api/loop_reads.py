"""The one-statement database reads that every search makes (the caller's key, the KBs searched), made by the
async handlers without a worker-thread hand-off where that is safe.

Why: in the stack on a 2-core machine a hand-off to a worker thread and back cost ~0.5 ms of wall time (waking
a sleeping thread, then the event loop), against ~50 µs for the read itself on SQLite, and a search made two of
them (README: Latency, reads on the event loop).

On SQLite (the embedded default) the read runs on the event loop, on connections of their own that only read
and never wait for a lock (ragkb_store.db.engine.lock_free_sqlite_reader): a WAL reader does not wait for
writers, and where it would have to wait (a connection holding the file exclusively) SQLite refuses at once and
the read is made in a worker thread instead, waiting there as every other read does, while the loop serves
other requests. On PostgreSQL a read is a network round trip, which must never block the loop: always a worker
thread, as before."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from anyio.to_thread import run_sync
from sqlalchemy import Engine, Executable
from sqlalchemy.engine import Row
from sqlalchemy.exc import OperationalError

from ragkb_store.db.engine import lock_free_sqlite_reader, waits_for_a_lock

# A row of any statement: its columns' number and types are the caller's to know.
AnyRow = Row[*tuple[Any, ...]]


class LoopReads:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._reader = lock_free_sqlite_reader(engine)

    @property
    def on_the_loop(self) -> bool:
        """Whether reads are made on the event loop (SQLite) rather than in a worker thread."""
        return self._reader is not None

    async def rows(self, statement: Executable, parameters: Mapping[str, Any]) -> Sequence[AnyRow]:
        """Every row of one read-only statement."""
        if self._reader is not None:
            try:
                return _rows(self._reader, statement, parameters)
            except OperationalError as exc:
                if not waits_for_a_lock(exc):
                    raise
        return await run_sync(_rows, self._engine, statement, parameters)

    def dispose(self) -> None:
        if self._reader is not None:
            self._reader.dispose()


def _rows(engine: Engine, statement: Executable, parameters: Mapping[str, Any]) -> Sequence[AnyRow]:
    with engine.connect() as connection:
        return connection.execute(statement, parameters).all()
