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
thread, as before.

On the loop a read goes to sqlite3 itself, with the statement compiled once by SQLAlchemy (per length of its
list parameters) and each column's value converted by its SQLAlchemy type, as a Core `execute` would: a read
through Core cost ~80 µs in process against ~10 µs for the same statement on the same connection, and a search
makes two (the api alone: bench/results/api-layer-ab-2026-12-07b.md). A statement this cannot compile that way
(parameters of a type that needs converting, an unexpected shape) is read through Core, as before."""

from __future__ import annotations

import re
import sqlite3
import threading
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from anyio.to_thread import run_sync
from sqlalchemy import Engine, Executable, Select
from sqlalchemy.exc import OperationalError

from ragkb_store.db.engine import lock_free_sqlite_reader, waits_for_a_lock

# A row of any statement, read by column name: its columns' number and types are the caller's to know. A Core Row,
# or from the direct path a named tuple of the same fields and values; typed by what the caller reads of it.
AnyRow = Any
# Where SQLAlchemy leaves an expanding parameter's list to be rendered at execution: `IN (__[POSTCOMPILE_ids])`.
_EXPANDING = re.compile(r"__\[POSTCOMPILE_(\w+)\]")
_PLAIN_VALUES = (str, int, float, type(None))


@dataclass(frozen=True)
class _Compiled:
    """A SELECT as sqlite3 runs it: its SQL with `?` placeholders, the parameter names in their order (a list
    parameter's name once per element), and what makes a row of its result."""

    sql: str
    order: tuple[str, ...]
    converters: tuple[Callable[[Any], Any] | None, ...]
    row: Callable[..., tuple[Any, ...]]

    def values(self, parameters: Mapping[str, Any]) -> list[Any]:
        values: list[Any] = []
        for name in self.order:
            value = parameters[name]
            if isinstance(value, list | tuple):
                values.extend(value)
            else:
                values.append(value)
        return values

    def rows(self, found: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        converters = self.converters
        return [
            self.row(
                *(
                    value if convert is None else convert(value)
                    for convert, value in zip(converters, found_row, strict=True)
                )
            )
            for found_row in found
        ]


class LoopReads:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._reader = lock_free_sqlite_reader(engine)
        # The reader's connection each event loop's thread reads on directly (a sqlite3 connection belongs to the
        # thread that made it), checked out of the reader's pool once, so its pragmas are the pool's.
        self._direct = threading.local()
        self._opened: list[Any] = []
        # (statement, lengths of its list parameters) → its compiled form, or None: read through Core.
        self._compiled: dict[tuple[int, tuple[int, ...]], tuple[Executable, _Compiled | None]] = {}

    @property
    def on_the_loop(self) -> bool:
        """Whether reads are made on the event loop (SQLite) rather than in a worker thread."""
        return self._reader is not None

    async def rows(self, statement: Executable, parameters: Mapping[str, Any]) -> Sequence[AnyRow]:
        """Every row of one read-only statement."""
        if self._reader is not None:
            try:
                return self._rows_on_the_loop(self._reader, statement, parameters)
            except (OperationalError, sqlite3.OperationalError) as exc:
                if not waits_for_a_lock(exc):
                    raise
        return await run_sync(_rows, self._engine, statement, parameters)

    def dispose(self) -> None:
        while self._opened:
            self._opened.pop().close()
        if self._reader is not None:
            self._reader.dispose()

    def _rows_on_the_loop(
        self, reader: Engine, statement: Executable, parameters: Mapping[str, Any]
    ) -> Sequence[AnyRow]:
        compiled = self._compiled_for(reader, statement, parameters)
        if compiled is None:
            return _rows(reader, statement, parameters)
        connection = getattr(self._direct, "connection", None)
        if connection is None:
            connection = self._direct.connection = reader.raw_connection()
            self._opened.append(connection)
        cursor = connection.cursor()
        try:
            cursor.execute(compiled.sql, compiled.values(parameters))
            return compiled.rows(list(cursor.fetchall()))
        finally:
            cursor.close()
            if connection.dbapi_connection is not None and connection.dbapi_connection.in_transaction:
                connection.rollback()  # a read must never hold a snapshot into the next one

    def _compiled_for(self, reader: Engine, statement: Executable, parameters: Mapping[str, Any]) -> _Compiled | None:
        lengths = tuple(
            len(value) if isinstance(value, list | tuple) else -1 for _, value in sorted(parameters.items())
        )
        key = (id(statement), lengths)
        cached = self._compiled.get(key)
        if cached is None:
            # The statement is kept with its compiled form, so its id stays its own.
            cached = self._compiled[key] = (statement, _compile(reader, statement, parameters))
        return cached[1] if all(_plain(value) for value in parameters.values()) else None


def _rows(engine: Engine, statement: Executable, parameters: Mapping[str, Any]) -> Sequence[AnyRow]:
    with engine.connect() as connection:
        return connection.execute(statement, parameters).all()


def _plain(value: Any) -> bool:
    """A value sqlite3 takes as it is (or a list of them), as SQLAlchemy would send it for a plain column."""
    if isinstance(value, list | tuple):
        return all(isinstance(item, _PLAIN_VALUES) for item in value)
    return isinstance(value, _PLAIN_VALUES)


def _compile(reader: Engine, statement: Executable, parameters: Mapping[str, Any]) -> _Compiled | None:
    """The statement for sqlite3, or None where it is not a SELECT of named parameters that need no converting."""
    if not isinstance(statement, Select):
        return None
    dialect = reader.dialect
    compiled = statement.compile(dialect=dialect)
    binds = compiled.binds
    order = tuple(compiled.positiontup or ())
    if set(order) != set(parameters) or any(
        binds[name].type.dialect_impl(dialect).bind_processor(dialect) is not None for name in order
    ):
        return None
    lengths = {name: len(value) for name, value in parameters.items() if isinstance(value, list | tuple)}
    expanding = {name for name in order if binds[name].expanding}
    if expanding != set(lengths) or any(length == 0 for length in lengths.values()):
        return None  # an empty list renders as a subquery of its own; Core does that
    sql = _EXPANDING.sub(lambda match: ", ".join("?" * lengths[match.group(1)]), compiled.string)
    if sql.count("?") != sum(lengths.get(name, 1) for name in order):
        return None
    columns = list(statement.selected_columns)
    converters = tuple(column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns)
    row = namedtuple("Row", list(statement.selected_columns.keys()))  # type: ignore[misc]
    return _Compiled(sql=sql, order=order, converters=converters, row=row)
