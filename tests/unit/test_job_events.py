"""Job event streams: one poller per job however many streams follow it, every stream sees every item once
and the end, and a key holds a bounded number of streams. A hand-written job source stands in for the
database (tests/e2e/test_hostile_clients.py follows real jobs)."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
from datetime import UTC, datetime

import pytest

from ragkb_api.jobs.events import JobEvents
from ragkb_api.jobs.schemas import JobCounts, JobOut, JobProgress
from ragkb_api.jobs.service import JobSnapshot, SettledItem
from ragkb_core.errors import NotFound, TooManyRequests
from ragkb_store.states import JobKind

ITEMS = 3


class ScriptedJob:
    """A job that settles one item per look and finishes after ITEMS of them; counts its looks."""

    def __init__(self) -> None:
        self.looks = 0
        self._lock = threading.Lock()

    def snapshot(self, job_id: str, reported: set[int]) -> JobSnapshot:
        with self._lock:
            self.looks += 1
            settled = min(self.looks, ITEMS)
        new = [SettledItem(n, f"doc-{n}", "upload", "done", None) for n in range(settled) if n not in reported]
        reported.update(item.id for item in new)
        status = "succeeded" if settled == ITEMS else "running"
        job = JobOut(
            id=job_id,
            kind=JobKind.SYNC,
            knowledge_base_id="kb",
            status=status,
            progress=JobProgress(current=settled, total=ITEMS),
            counts=JobCounts(uploaded=settled),
            errors=[],
            created_at=datetime.now(UTC),
            started_at=None,
            finished_at=None,
        )
        return JobSnapshot(job, new, status == "succeeded")


class MissingJob:
    def snapshot(self, job_id: str, reported: set[int]) -> JobSnapshot:
        raise NotFound(f"job {job_id} no longer exists")


async def _read(events: JobEvents, job_id: str, key_id: str) -> list[tuple[str, dict[str, object]]]:
    return [(message.event or "", json.loads(str(message.data))) async for message in events.follow(job_id, key_id)]


def test_many_streams_of_one_job_share_one_poller_and_each_sees_every_item_once() -> None:
    job = ScriptedJob()
    events = JobEvents(job, max_streams_per_key=50, poll_interval_s=0.05)

    async def follow_all() -> list[list[tuple[str, dict[str, object]]]]:
        return list(await asyncio.gather(*(_read(events, "job", f"key-{n % 5}") for n in range(40))))

    streams = asyncio.run(follow_all())
    assert job.looks == ITEMS  # one look per poll for the 40 streams, not 40
    for stream in streams:
        kinds = [kind for kind, _ in stream]
        assert kinds == ["progress"] * ITEMS + ["complete"]
        assert [data["source_id"] for _, data in stream[:ITEMS]] == ["doc-0", "doc-1", "doc-2"]
        assert [data["current"] for _, data in stream[:ITEMS]] == [1, 2, 3]
    assert events.slots.open_streams("key-0") == 0


def test_a_key_past_its_streams_is_refused_until_one_closes() -> None:
    events = JobEvents(ScriptedJob(), max_streams_per_key=2)
    first, _second = events.follow("job", "k"), events.follow("job", "k")
    with pytest.raises(TooManyRequests) as refused:
        events.follow("job", "k")
    assert refused.value.headers["Retry-After"] and "2 job event streams" in refused.value.detail
    events.follow("job", "other-key")  # another key's budget is its own
    del first  # a stream that never started (its client left first) gives its place back too
    gc.collect()
    events.follow("job", "k")


def test_a_job_that_cannot_be_followed_ends_every_stream_with_an_error() -> None:
    events = JobEvents(MissingJob(), max_streams_per_key=4, poll_interval_s=0.05)

    async def follow_two() -> list[list[tuple[str, dict[str, object]]]]:
        return list(await asyncio.gather(_read(events, "gone", "k"), _read(events, "gone", "k")))

    for stream in asyncio.run(follow_two()):
        assert stream == [("error", {"message": "job gone no longer exists"})]
    assert events.slots.open_streams("k") == 0
