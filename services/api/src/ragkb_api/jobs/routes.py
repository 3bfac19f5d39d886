"""Routes of sync, retry-failed, re-index and rollback on a KB, and of jobs: read, list, follow (SSE), cancel."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
from anyio.to_thread import run_sync
from litestar import Controller, Request, Response, get, post
from litestar.params import Parameter
from litestar.response import ServerSentEvent, ServerSentEventMessage

from ragkb_api.access import Caller
from ragkb_api.jobs.reindex import ReindexService
from ragkb_api.jobs.schemas import JobOut, QueueOut, ReindexRequest, SyncPlanOut, SyncRequest
from ragkb_api.jobs.service import RECENT_JOBS, JobService, JobSnapshot
from ragkb_api.knowledge_bases.schemas import KnowledgeBaseOut
from ragkb_api.knowledge_bases.service import KnowledgeBaseService
from ragkb_api.paging import PAGE_HEADERS, Limit, Offset, PageRequest, paged_response
from ragkb_core.errors import RagkbError
from ragkb_http import access
from ragkb_store.states import JobKind

# How often an event stream looks at its job: the database is polled (progress is written by other processes).
POLL_INTERVAL_S = 0.4
SYNC_DESCRIPTION = """Compare the client's folder (a manifest of `source_id`, `sha256`, `size`, `mtime`) with the
KB and answer the plan: `upload` (new, changed, or failed before), `unchanged`, `delete` (documents whose
source_id is not in the manifest, or is excluded by the KB's sync rules) and `excluded`. Unless `dry_run`,
the orphans are deleted within this call and a job (`job_id`) waits for the uploads: upload each `upload`
file with POST .../documents (multipart `file` + `source_id`), then follow GET /v1/jobs/{job_id}/events."""
EVENTS_DESCRIPTION = """Server-sent events: `progress` {current, total, source_id, action, status, message} for
every item as it settles (a late client first gets those already settled, or one `progress` with the current
numbers), then `complete` {status, counts, errors}; `error` {message} if the job cannot be followed. The
stream ends after `complete` or `error`."""


REINDEX_DESCRIPTION = """A job (kind `reindex`) rebuilds every indexed document from its stored original into a new
index generation while the current one keeps serving; documents uploaded or deleted meanwhile are caught up.
When the new generation holds every indexed document at its live version, the KB switches to it in one step
and its `chunking`/`analyzer` become the new ones; the previous generation is kept for POST .../rollback.
One re-index per KB at a time (409)."""


class KnowledgeBaseJobController(Controller):
    path = "/v1/knowledge-bases/{kb_id:str}"
    tags = ["sync and jobs"]

    @post(
        "/sync",
        status_code=200,
        sync_to_thread=True,
        summary="Sync a folder: plan uploads, delete orphans",
        description=SYNC_DESCRIPTION,
        opt=access("write"),
    )
    def sync(self, kb_id: str, data: SyncRequest, job_service: JobService, caller: Caller) -> SyncPlanOut:
        return job_service.sync(kb_id, data, caller)

    @post(
        "/retry-failed",
        status_code=202,
        sync_to_thread=True,
        summary="Queue every failed document again, as one job",
        opt=access("write"),
    )
    def retry_failed(self, kb_id: str, job_service: JobService, caller: Caller) -> JobOut:
        return job_service.retry_failed(kb_id, caller)

    @post(
        "/reindex",
        status_code=202,
        sync_to_thread=True,
        summary="Rebuild the index from the stored originals (optionally with new chunking or analyzer), then switch",
        description=REINDEX_DESCRIPTION,
        opt=access("admin"),
    )
    def reindex(
        self,
        kb_id: str,
        reindex_service: ReindexService,
        job_service: JobService,
        caller: Caller,
        data: ReindexRequest | None = None,
    ) -> JobOut:
        job_id = reindex_service.start(kb_id, data or ReindexRequest())
        return job_service.get(job_id, caller)

    @post(
        "/rollback",
        status_code=200,
        sync_to_thread=True,
        summary="Serve the previous index generation again, with the settings it was built with",
        opt=access("admin"),
    )
    def rollback(
        self, kb_id: str, reindex_service: ReindexService, kb_service: KnowledgeBaseService
    ) -> KnowledgeBaseOut:
        reindex_service.rollback(kb_id)
        return kb_service.get(kb_id)

    @get(
        "/jobs",
        sync_to_thread=True,
        summary="Jobs of a knowledge base, newest first (every kind but ingest runs, unless `kind` asks for them)",
        opt=access("read"),
        response_headers=PAGE_HEADERS,
    )
    def list_jobs(
        self,
        *,
        kb_id: str,
        request: Request[Any, Any, Any],
        job_service: JobService,
        caller: Caller,
        kind: Annotated[JobKind | None, Parameter(query="kind")] = None,
        limit: Limit = RECENT_JOBS,
        offset: Offset = 0,
    ) -> Response[list[JobOut]]:
        return paged_response(job_service.list_for_kb(kb_id, caller, kind, PageRequest(limit, offset)), request)

    @get(
        "/queue",
        sync_to_thread=True,
        summary="The KB's documents waiting and being built, per lane (interactive before bulk)",
        opt=access("read"),
    )
    def queue(self, kb_id: str, job_service: JobService) -> QueueOut:
        return job_service.queue(kb_id)


class JobController(Controller):
    path = "/v1/jobs"
    tags = ["sync and jobs"]

    # "caller": the service checks the caller's grant on the job's KB (unknown and ungranted ids: one 404).
    @get(
        "/{job_id:str}",
        sync_to_thread=True,
        summary="A job's status, progress, counts and errors",
        opt=access("caller"),
    )
    def get_one(self, job_id: str, job_service: JobService, caller: Caller) -> JobOut:
        return job_service.get(job_id, caller)

    @post("/{job_id:str}/cancel", status_code=200, sync_to_thread=True, summary="Cancel a job", opt=access("caller"))
    def cancel(self, job_id: str, job_service: JobService, caller: Caller) -> JobOut:
        return job_service.cancel(job_id, caller)

    @get(
        "/{job_id:str}/events",
        summary="Follow a job's progress (server-sent events)",
        description=EVENTS_DESCRIPTION,
        opt=access("caller"),
    )
    async def events(self, job_id: str, job_service: JobService, caller: Caller) -> ServerSentEvent:
        await run_sync(job_service.check_readable, job_id, caller)
        return ServerSentEvent(follow_job(job_service, job_id), headers={"Cache-Control": "no-store"})


async def follow_job(job_service: JobService, job_id: str) -> AsyncIterator[ServerSentEventMessage]:
    """Poll the job until it finishes; ends (and stops polling) when it does or when the client goes away."""
    reported: set[int] = set()
    first = True
    while True:
        try:
            snapshot = await run_sync(job_service.snapshot, job_id, reported)
        except RagkbError as exc:
            yield _event("error", {"message": exc.detail})
            return
        for message in _progress_events(snapshot, len(reported) - len(snapshot.newly_settled), first):
            yield message
        first = False
        if snapshot.finished:
            yield _event("complete", _complete(snapshot))
            return
        await anyio.sleep(POLL_INTERVAL_S)


def _progress_events(snapshot: JobSnapshot, already: int, first: bool) -> list[ServerSentEventMessage]:
    total = snapshot.job.progress.total
    if first and not snapshot.newly_settled:
        data = {"current": 0, "total": total, "source_id": None, "action": None, "status": None, "message": None}
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
        for index, item in enumerate(snapshot.newly_settled, start=1)
    ]


def _complete(snapshot: JobSnapshot) -> dict[str, Any]:
    job = snapshot.job
    errors = [error.model_dump() for error in job.errors]
    return {"status": job.status, "counts": job.counts.model_dump(), "errors": errors}


def _event(kind: str, data: dict[str, Any]) -> ServerSentEventMessage:
    return ServerSentEventMessage(event=kind, data=json.dumps(data, ensure_ascii=False))
