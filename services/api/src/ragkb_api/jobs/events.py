"""Job event streams (`GET /v1/jobs/{id}/events`, server-sent events), bounded for a hostile client.

Progress is written by other processes, so the database is polled. One poller per job (a `_Feed`) polls it
for every stream of that job in this api process and stops once the job ended or its last stream went away:
a hundred streams of one job cost one poll every POLL_INTERVAL_S, not a hundred. Each key may hold at most
`max_streams_per_key` streams at once in this process (RAGKB_LIMITS__MAX_STREAMS_PER_KEY); one more is
refused with 429 and Retry-After before it opens.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from anyio.to_thread import run_sync
from litestar.response import ServerSentEventMessage

from ragkb_api.jobs.schemas import JobOut
from ragkb_api.jobs.service import JobSnapshot, SettledItem
from ragkb_core.errors import RagkbError, TooManyRequests
from ragkb_store.states import JobKind

_log = logging.getLogger("ragkb.api.jobs")
# How often a job's poller looks at the database.
POLL_INTERVAL_S = 0.4
# What a key refused one more stream is told to wait: streams end when their job does, at no set time.
STREAM_RETRY_AFTER_S = 10


class JobSnapshots(Protocol):
    """Where a poller reads its job (ragkb_api.jobs.service.JobService)."""

    def snapshot(self, job_id: str, reported: set[int]) -> JobSnapshot: ...


class StreamSlots:
    """How many event streams each key holds open in this process, capped."""

    def __init__(self, per_key: int) -> None:
        self._per_key = per_key
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()

    def acquire(self, key_id: str) -> StreamSlot:
        with self._lock:
            if self._open.get(key_id, 0) >= self._per_key:
                raise TooManyRequests(
                    f"this key already follows {self._per_key} job event streams, the most it may hold open at once; "
                    "close one (or poll GET /v1/jobs/{job_id})",
                    retry_after_s=STREAM_RETRY_AFTER_S,
                )
            self._open[key_id] = self._open.get(key_id, 0) + 1
        return StreamSlot(self, key_id)

    def open_streams(self, key_id: str) -> int:
        return self._open.get(key_id, 0)

    def _release(self, key_id: str) -> None:
        with self._lock:
            left = self._open.get(key_id, 1) - 1
            if left > 0:
                self._open[key_id] = left
            else:
                self._open.pop(key_id, None)


class StreamSlot:
    """One open stream of a key; released once, however the stream ends."""

    def __init__(self, slots: StreamSlots, key_id: str) -> None:
        self._slots = slots
        self._key_id = key_id
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._slots._release(self._key_id)


@dataclass
class _Feed:
    """What one job's poller has seen: every item settled so far, the job now, and how it ended."""

    job_id: str
    streams: int = 0
    settled: list[SettledItem] = field(default_factory=list)
    job: JobOut | None = None
    finished: bool = False
    error: str | None = None
    version: int = 0
    updated: anyio.Event = field(default_factory=anyio.Event)
    poller: asyncio.Task[None] | None = None

    @property
    def ended(self) -> bool:
        return self.finished or self.error is not None

    def publish(self) -> None:
        self.version += 1
        self.updated.set()
        self.updated = anyio.Event()


class JobEvents:
    def __init__(self, jobs: JobSnapshots, max_streams_per_key: int, poll_interval_s: float = POLL_INTERVAL_S) -> None:
        self._jobs = jobs
        self._slots = StreamSlots(max_streams_per_key)
        self._poll_interval_s = poll_interval_s
        self._feeds: dict[str, _Feed] = {}

    @property
    def slots(self) -> StreamSlots:
        return self._slots

    def follow(self, job_id: str, key_id: str) -> AsyncIterator[ServerSentEventMessage]:
        """The event stream of one job for one key, or TooManyRequests when the key holds its most streams."""
        slot = self._slots.acquire(key_id)
        stream = self._stream(job_id, slot)
        # A stream that is never iterated (the client left before it started) never reaches its `finally`.
        weakref.finalize(stream, slot.release)
        return stream

    async def _stream(self, job_id: str, slot: StreamSlot) -> AsyncIterator[ServerSentEventMessage]:
        feed = self._join(job_id)
        try:
            async for message in _messages(feed):
                yield message
        finally:
            feed.streams -= 1
            slot.release()

    def _join(self, job_id: str) -> _Feed:
        feed = self._feeds.get(job_id)
        if feed is None:
            feed = self._feeds[job_id] = _Feed(job_id)
            feed.poller = asyncio.get_running_loop().create_task(self._poll(feed))
        feed.streams += 1
        return feed

    async def _poll(self, feed: _Feed) -> None:
        reported: set[int] = set()
        try:
            while feed.streams > 0:
                await self._look(feed, reported)
                feed.publish()
                if feed.ended:
                    return
                await anyio.sleep(self._poll_interval_s)
        finally:
            # Nothing awaits between the last publish and here: no stream joins a feed that has ended.
            if self._feeds.get(feed.job_id) is feed:
                del self._feeds[feed.job_id]

    async def _look(self, feed: _Feed, reported: set[int]) -> None:
        try:
            snapshot = await run_sync(self._jobs.snapshot, feed.job_id, reported)
        except RagkbError as exc:
            feed.error = exc.detail
            return
        except Exception:  # the database failed: the streams end with an error rather than wait for ever
            _log.exception("following job %s failed", feed.job_id)
            feed.error = "the job cannot be followed now; read it with GET /v1/jobs/{job_id}"
            return
        feed.settled.extend(snapshot.newly_settled)
        feed.job = snapshot.job
        feed.finished = snapshot.finished


async def _messages(feed: _Feed) -> AsyncIterator[ServerSentEventMessage]:
    """One stream's events from its job's feed: those settled before it joined, then each as it settles."""
    seen_version, shown, first = 0, 0, True
    # A tune has no items: it reports its own counters, an event each time they move.
    counted: tuple[int, int] | None = None
    while True:
        if feed.version == seen_version:
            await feed.updated.wait()
            continue
        seen_version = feed.version
        if feed.error is not None:
            yield _event("error", {"message": feed.error})
            return
        assert feed.job is not None  # a version without an error carries the job
        for message in _progress_events(feed.job, feed.settled[shown:], shown, first):
            yield message
        if not first and feed.job.kind == JobKind.TUNE and _numbers(feed.job) != counted:
            yield _event("progress", _itemless_progress(feed.job))
        shown, first, counted = len(feed.settled), False, _numbers(feed.job)
        if feed.finished:
            yield _event("complete", _complete(feed.job))
            return


def _progress_events(job: JobOut, new: list[SettledItem], already: int, first: bool) -> list[ServerSentEventMessage]:
    total = job.progress.total
    if first and not new:
        current = job.progress.current if job.kind == JobKind.TUNE else 0
        data = {"current": current, "total": total, "source_id": None, "action": None, "status": None, "message": None}
        return [_event("progress", data)]
    return [
        _event(
            "progress",
            {
                "current": already + index,
                "total": total,
                "source_id": item.source_id,
                "action": item.action,
                "status": item.status,
                "message": item.message,
            },
        )
        for index, item in enumerate(new, start=1)
    ]


def _numbers(job: JobOut) -> tuple[int, int]:
    return job.progress.current, job.progress.total


def _itemless_progress(job: JobOut) -> dict[str, Any]:
    current, total = _numbers(job)
    return {"current": current, "total": total, "source_id": None, "action": None, "status": None, "message": None}


def _complete(job: JobOut) -> dict[str, Any]:
    errors = [error.model_dump() for error in job.errors]
    return {"status": job.status, "counts": job.counts.model_dump(), "errors": errors}


def _event(kind: str, data: dict[str, Any]) -> ServerSentEventMessage:
    return ServerSentEventMessage(event=kind, data=json.dumps(data, ensure_ascii=False))
