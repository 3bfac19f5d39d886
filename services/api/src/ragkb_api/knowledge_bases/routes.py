"""Routes of knowledge bases: create, list, read, change, delete (a job)."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, delete, get, patch, post

from ragkb_api.access import Caller
from ragkb_api.jobs.schemas import JobOut
from ragkb_api.jobs.service import JobService
from ragkb_api.knowledge_bases.consistency import ConsistencyService
from ragkb_api.knowledge_bases.deletion import KbDeletionService
from ragkb_api.knowledge_bases.schemas import (
    ConsistencyRepairOut,
    ConsistencyReportOut,
    KnowledgeBaseCreate,
    KnowledgeBaseOut,
    KnowledgeBaseUpdate,
)
from ragkb_api.knowledge_bases.service import KnowledgeBaseService
from ragkb_api.paging import MAX_PAGE, PAGE_HEADERS, Limit, Offset, PageRequest, paged_response
from ragkb_http import access

CREATE_DESCRIPTION = """A native KB (ragkb indexes its documents), or with `external` a KB whose index is managed
elsewhere and which ragkb only searches: `config.kind` `qdrant` (a collection by `url`, or a local-mode `path`
under RAGKB_EXTERNAL__QDRANT_LOCAL_ROOTS; payload `fields`, `dense_vector`, optional `sparse_vector`, the
`embedding_model` it was written with) or `dify` (an External Knowledge API `endpoint` and `knowledge_id`), with
an optional `api_key` stored sealed and never shown. An external KB is searched, merged and granted like a native
one; its writes (documents, sources, syncs, re-index, chunking) answer 409 read-only-knowledge-base."""
DELETE_DESCRIPTION = """A job (kind `kb_delete`, 202): the KB's index is dropped first, then its documents in
batches (progress = documents deleted of those it had), then the stored originals no other document uses,
then the KB itself; follow GET /v1/jobs/{id} or its /events. From the moment it is accepted the KB is
`deleting`: uploads, syncs, re-indexes and searches naming it answer 409, and once it is gone 404. A
deletion cannot be cancelled; if it fails, DELETE again finishes it (an unfinished one is queued again and
answered as it is). 409 while a re-index of the KB runs."""


CONSISTENCY_DESCRIPTION = """Every `done` document has exactly its indexed version's chunks in the live index
generation (as many as its chunk count), no point belongs to a version no document state allows (superseded,
deleted, failed) or to a document the database does not have, and no document is `processing` past its lease.
A finding is reported only if a second pass a moment later sees it too (a document moving on between the two
reads is not one)."""


class KnowledgeBaseController(Controller):
    path = "/v1/knowledge-bases"
    tags = ["knowledge bases"]

    @post(
        "/",
        status_code=201,
        sync_to_thread=True,
        summary="Create a knowledge base, or register an external one (a Qdrant collection or a Dify endpoint)",
        description=CREATE_DESCRIPTION,
        opt=access("admin"),
    )
    def create(self, data: KnowledgeBaseCreate, kb_service: KnowledgeBaseService, caller: Caller) -> KnowledgeBaseOut:
        return kb_service.create(data, caller.key_id)

    @get(
        "/",
        sync_to_thread=True,
        summary="List the knowledge bases this key may read, a page at a time",
        opt=access("caller"),
        response_headers=PAGE_HEADERS,
    )
    def list_all(
        self,
        request: Request[Any, Any, Any],
        kb_service: KnowledgeBaseService,
        caller: Caller,
        limit: Limit = MAX_PAGE,
        offset: Offset = 0,
    ) -> Response[list[KnowledgeBaseOut]]:
        return paged_response(kb_service.list(caller, PageRequest(limit, offset)), request)

    @get(
        "/{kb_id:str}",
        sync_to_thread=True,
        summary="Get a knowledge base with document counts per status",
        opt=access("read"),
    )
    def get_one(self, kb_id: str, kb_service: KnowledgeBaseService) -> KnowledgeBaseOut:
        return kb_service.get(kb_id)

    @patch(
        "/{kb_id:str}",
        sync_to_thread=True,
        summary="Rename a KB or change its chunking, retrieval (a new settings version) or sync settings",
        opt=access("admin"),
    )
    def update(
        self, kb_id: str, data: KnowledgeBaseUpdate, kb_service: KnowledgeBaseService, caller: Caller
    ) -> KnowledgeBaseOut:
        return kb_service.update(kb_id, data, caller.key_id)

    @delete(
        "/{kb_id:str}",
        status_code=202,
        sync_to_thread=True,
        summary="Delete a KB, its documents and index, as a job",
        description=DELETE_DESCRIPTION,
        opt=access("admin"),
    )
    def remove(
        self, kb_id: str, kb_deletion_service: KbDeletionService, job_service: JobService, caller: Caller
    ) -> JobOut:
        job_id = kb_deletion_service.start(kb_id)
        return job_service.get(job_id, caller)

    @get(
        "/{kb_id:str}/consistency",
        sync_to_thread=True,
        summary="Check that the KB's live index holds exactly what its documents say",
        description=CONSISTENCY_DESCRIPTION,
        opt=access("admin"),
    )
    def consistency(self, kb_id: str, consistency_service: ConsistencyService) -> ConsistencyReportOut:
        return consistency_service.check(kb_id)

    @post(
        "/{kb_id:str}/consistency/repair",
        status_code=200,
        sync_to_thread=True,
        summary="Re-queue the documents the index lacks and delete orphan points (idempotent)",
        opt=access("admin"),
    )
    def repair(self, kb_id: str, consistency_service: ConsistencyService) -> ConsistencyRepairOut:
        return consistency_service.repair(kb_id)
