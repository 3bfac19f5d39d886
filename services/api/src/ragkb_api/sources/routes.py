"""Routes of a KB's sources: create, list, read, delete, run now (a job)."""

from __future__ import annotations

from litestar import Controller, delete, get, post

from ragkb_api.access import Caller
from ragkb_api.jobs.schemas import JobOut
from ragkb_api.jobs.service import JobService
from ragkb_api.sources.schemas import SourceCreate, SourceOut
from ragkb_api.sources.service import SourceService
from ragkb_http import access

CREATE_DESCRIPTION = """A source the KB reads itself: `config.kind` `folder` (a path under
RAGKB_SOURCES__FOLDER_ROOTS), `web` (a start URL, same origin, robots.txt, sitemap.xml, depth and page limits,
content types), `git` (an http(s) URL or a local path under the roots, a branch, path globs) or `s3` (a bucket and
prefix, an optional S3-compatible endpoint). Optional `credentials` (a `token`, or `username` and `password`; for
S3 the access key id and secret) are stored encrypted and never shown again. With
`interval_s` or `cron` (UTC) it runs by itself, the first time at once. Its documents' source_ids are
`name:key` (the key: a path in the folder or repository, or a page's URL)."""
RUN_DESCRIPTION = """A run as a job (kind `sync`, 202): the source is listed, then planned against the documents it
made as a sync is (only new and changed items are uploaded, items gone are deleted). Follow GET
/v1/jobs/{id} or its /events. 409 while a run of this source is in progress."""


class SourceController(Controller):
    path = "/v1/knowledge-bases/{kb_id:str}/sources"
    tags = ["sources"]

    @post(
        "/",
        status_code=201,
        sync_to_thread=True,
        summary="Add a source (folder, web site, Git repository, S3 bucket) with an optional schedule",
        description=CREATE_DESCRIPTION,
        opt=access("admin"),
    )
    def create(self, kb_id: str, data: SourceCreate, source_service: SourceService) -> SourceOut:
        return source_service.create(kb_id, data)

    @get("/", sync_to_thread=True, summary="The KB's sources, with their last and next runs", opt=access("read"))
    def list_all(self, kb_id: str, source_service: SourceService) -> list[SourceOut]:
        return source_service.list(kb_id)

    @get("/{source_id:str}", sync_to_thread=True, summary="A source and its last and next runs", opt=access("read"))
    def get_one(self, kb_id: str, source_id: str, source_service: SourceService) -> SourceOut:
        return source_service.get(kb_id, source_id)

    @delete(
        "/{source_id:str}",
        status_code=204,
        sync_to_thread=True,
        summary="Remove a source (its documents stay)",
        opt=access("admin"),
    )
    def remove(self, kb_id: str, source_id: str, source_service: SourceService) -> None:
        source_service.delete(kb_id, source_id)

    @post(
        "/{source_id:str}/run",
        status_code=202,
        sync_to_thread=True,
        summary="Run a source now",
        description=RUN_DESCRIPTION,
        opt=access("write"),
    )
    def run(
        self, kb_id: str, source_id: str, source_service: SourceService, job_service: JobService, caller: Caller
    ) -> JobOut:
        return job_service.get(source_service.run(kb_id, source_id), caller)
