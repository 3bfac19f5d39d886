"""Open Edge shards and their upkeep: who is using a shard, when it is closed, flushed and optimised."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from qdrant_edge import EdgeShard

from ragkb_telemetry import metrics

logger = logging.getLogger(__name__)


class ShardClosedError(Exception):
    """The shard was closed (its KB dropped, or the index closed) before this call could use it."""


class ShardHandle:
    """One open `EdgeShard`. Calls take a lease through `use()`, so that `close()` waits for them
    instead of pulling the shard from under a running query; a lock keeps a synchronous optimise and
    the background one from running on the shard at the same time."""

    def __init__(self, name: str, shard: EdgeShard, *, wal: Path | None = None) -> None:
        self.name = name
        self._shard = shard
        # The shard's WAL folder, synced by `sync_wal_if_written`; None: only `flush` makes writes durable.
        self._wal = wal
        self._state = threading.Condition()
        self._users = 0
        self._closed = False
        self._unflushed = False
        self._wal_unsynced = False
        self._written_since_optimize = 0
        self._last_write = time.monotonic()
        self._optimize_lock = threading.Lock()
        # Whether the shard's points have numbered ids (ragkb_core.ids); None until EdgeIndex knows it, from the
        # first point it reads or the first write.
        self.numbered_ids: bool | None = None

    @contextmanager
    def use(self) -> Iterator[EdgeShard]:
        with self._state:
            if self._closed:
                raise ShardClosedError(self.name)
            self._users += 1
        try:
            yield self._shard
        finally:
            with self._state:
                self._users -= 1
                self._state.notify_all()

    def record_write(self, points: int = 0) -> int:
        """Note a write of `points` new points; returns how many were written since the last optimise."""
        with self._state:
            self._unflushed = self._wal_unsynced = True
            self._written_since_optimize += points
            self._last_write = time.monotonic()
            return self._written_since_optimize

    def seconds_since_write(self) -> float:
        with self._state:
            return time.monotonic() - self._last_write

    @property
    def awaiting_wal_sync(self) -> bool:
        """Whether writes were acknowledged since the WAL was last synced (or the shard flushed)."""
        with self._state:
            return self._wal_unsynced

    @property
    def awaiting_flush(self) -> bool:
        with self._state:
            return self._unflushed

    def sync_wal_if_written(self) -> None:
        """Sync the WAL's files to disk if a write came since the last sync: the acknowledged writes then survive
        a power loss. Edge keeps its WAL in memory-mapped files, which an fsync of each file writes out; unlike
        Edge's `flush`, os.fsync lets the GIL go, so searches run meanwhile."""
        with self._state:
            if not self._wal_unsynced or self._wal is None:
                return
            # Cleared before the sync: a write that lands during it is synced next time.
            self._wal_unsynced = False
        with self.use(), _timed("wal_sync"):  # the shard stays open (and its WAL in place) while it is synced
            _fsync_folder(self._wal)

    def flush_if_written(self) -> None:
        with self._state:
            if not self._unflushed:
                return
            # Cleared before the flush: a write that lands during it is flushed next time.
            self._unflushed = self._wal_unsynced = False
        with self.use() as shard, _timed("flush"):
            shard.flush()

    def optimize(self) -> bool:
        """Build HNSW and merge segments now. Returns whether anything changed."""
        with self._optimize_lock, self.use() as shard:
            with self._state:
                # Reset before, not after: points written while this runs count towards the next one.
                self._written_since_optimize = 0
            with _timed("optimize"):
                return shard.optimize()

    def close(self) -> None:
        """Wait for the calls in flight, then flush and close. Later calls raise `ShardClosedError`."""
        with self._state:
            if self._closed:
                return
            self._closed = True
            self._state.wait_for(lambda: self._users == 0)
        self._shard.flush()
        self._shard.close()


def _timed(operation: str) -> Any:
    """Times an upkeep operation in ragkb_index_upkeep_seconds (flush and optimize: time every search waited)."""
    return metrics.child(metrics.index_upkeep_duration, operation).time()


def _fsync_folder(folder: Path) -> None:
    """fsync every file in `folder`, then the folder itself (a WAL segment created since is then found after a
    power loss). A file Edge removes meanwhile (a WAL segment it retired) is skipped."""
    try:
        entries = [entry.path for entry in os.scandir(folder) if entry.is_file()]
    except FileNotFoundError:  # no WAL there (an Edge that keeps it elsewhere): the whole flush alone covers it
        return
    for path in entries:
        _fsync_path(path)
    _fsync_path(str(folder))


def _fsync_path(path: str) -> None:
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class ShardMaintainer:
    """The one background thread of an EdgeIndex. It optimises shards on request, one at a time, each
    queued at most once; syncs the WAL of the shards written since the last sync every `wal_sync_interval_s`,
    and flushes them whole every `flush_interval_s` (see edge.py on why the two differ).

    Edge builds HNSW only inside `optimize()` (seconds for tens of thousands of points), so that must
    never run on a request thread. Flushing in the background keeps the disk sync (tens of
    milliseconds, more on a busy disk, all of it holding the GIL) off every write.
    """

    def __init__(
        self,
        open_shards: Callable[[], list[ShardHandle]],
        *,
        flush_interval_s: float,
        wal_sync_interval_s: float,
        optimize_idle_s: float = 0.0,
    ) -> None:
        self._open_shards = open_shards
        self._flush_interval_s = flush_interval_s
        self._wal_sync_interval_s = wal_sync_interval_s
        self._optimize_idle_s = optimize_idle_s
        self._queue: queue.SimpleQueue[ShardHandle | None] = queue.SimpleQueue()
        self._queued: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ragkb-edge-maintainer", daemon=True)
        self._thread.start()

    def request_optimize(self, handle: ShardHandle) -> None:
        with self._lock:
            if handle.name in self._queued or self._stopping.is_set():
                return
            self._queued.add(handle.name)
        self._queue.put(handle)

    def stop(self) -> None:
        """Skip queued optimisations, wait for a running one to finish, end the thread."""
        self._stopping.set()
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        next_flush = time.monotonic() + self._flush_interval_s
        next_sync = time.monotonic() + self._wal_sync_interval_s
        while True:
            try:
                handle = self._queue.get(timeout=max(0.0, min(next_flush, next_sync) - time.monotonic()))
            except queue.Empty:
                handle = None
            if self._stopping.is_set():
                return
            if handle is not None:
                self._optimize(handle)
            if time.monotonic() >= next_flush:
                self._each_shard("flush", ShardHandle.flush_if_written)
                next_flush = time.monotonic() + self._flush_interval_s
            if time.monotonic() >= next_sync:
                self._each_shard("wal_sync", ShardHandle.sync_wal_if_written)
                next_sync = time.monotonic() + self._wal_sync_interval_s

    def _optimize(self, handle: ShardHandle) -> None:
        quiet_for = handle.seconds_since_write()
        if quiet_for < self._optimize_idle_s:
            # Writes are still arriving (a bulk ingest): optimising now would freeze the whole process
            # (Edge holds the GIL) and be partly redone. Look again shortly; the shard stays queued once.
            self._stopping.wait(min(self._optimize_idle_s - quiet_for, 1.0))
            self._queue.put(handle)
            return
        with self._lock:
            self._queued.discard(handle.name)
        self._guarded("optimize", handle, ShardHandle.optimize)

    def _each_shard(self, what: str, action: Callable[[ShardHandle], object]) -> None:
        for handle in self._open_shards():
            self._guarded(what, handle, action)

    @staticmethod
    def _guarded(what: str, handle: ShardHandle, action: Callable[[ShardHandle], object]) -> None:
        try:
            action(handle)
        except ShardClosedError:
            pass  # its KB was dropped (or the index closed) meanwhile; closing flushed it
        except Exception:
            # The shard stays usable: unoptimised it is searched exactly, unflushed its WAL still holds
            # every write. Log and go on with the others.
            logger.exception("background %s of %s failed", what, handle.name)
