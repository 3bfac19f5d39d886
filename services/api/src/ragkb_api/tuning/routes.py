"""Routes of tuning a KB (a job) and of the versions of its retrieval settings."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, get, post
from litestar.params import Parameter

from ragkb_api.access import Caller
from ragkb_api.jobs.schemas import JobOut
from ragkb_api.jobs.service import JobService
from ragkb_api.paging import MAX_PAGE, PAGE_HEADERS, Limit, Offset, PageRequest, paged_response
from ragkb_api.tuning.schemas import ChangeReason, SettingsVersionOut, TuneOut
from ragkb_api.tuning.service import TuneService
from ragkb_api.tuning.versions import SettingsVersionService
from ragkb_core.tuning import TuneRequest
from ragkb_http import access

VersionNumber = Annotated[int, Parameter(ge=1, le=2**31 - 1, description="a settings version of the KB")]
TUNE_DESCRIPTION = """A job (kind `tune`, 202): the KB's retrieval settings searched on one of its question sets
with k-fold cross-validation. Every question's dense and keyword candidates are fetched once, as deep as the
deepest setting reads (top_k × the largest candidate_multiplier), and every setting's answer is computed from
them as the search computes it; each is scored by nDCG@10 over documents. Searched: `space` (fusion method, RRF
k, the keyword leg's weight against the dense leg's 1, candidate_multiplier) and the KB's current settings.
Not searched: analyzer options (they change the indexed terms: a re-index, POST .../reindex), the reranker
(a KB with rerank = true is refused with 409), top_k, max_blocks and min_relevance.

Per fold, the best setting on the other folds is scored on the held-out one beside the current settings; the
held-out gain and its 95 % interval (paired bootstrap over the held-out questions) say whether the change
generalises; the recommended setting is the best on all questions. Follow GET /v1/jobs/{id}/events (progress:
questions fetched); read GET .../tune/{id}; nothing changes until POST .../tune/{id}/apply. 404: no such
question set; 422: fewer than 2 questions per fold, a search space over its bounds."""
APPLY_DESCRIPTION = """The tune's recommended settings become the KB's next settings version (revertible: POST
.../settings/versions/{n}/revert). 409 while the tune has not succeeded, when it recommends the current
settings, or when the KB's settings changed since the tune ran."""
REVERT_DESCRIPTION = """The settings of version `version` become the KB's next version (recorded even when they
equal the current ones)."""


class TuneController(Controller):
    path = "/v1/knowledge-bases/{kb_id:str}"
    tags = ["tuning"]

    @post(
        "/tune",
        status_code=202,
        sync_to_thread=True,
        summary="Tune the KB's retrieval settings on a question set (cross-validated), as a job",
        description=TUNE_DESCRIPTION,
        opt=access("admin"),
    )
    def tune(
        self, kb_id: str, data: TuneRequest, tune_service: TuneService, job_service: JobService, caller: Caller
    ) -> JobOut:
        return job_service.get(tune_service.start(kb_id, data, caller), caller)

    @get(
        "/tune/{job_id:str}",
        sync_to_thread=True,
        summary="A tune job and, once it succeeded, its folds, held-out gain and recommendation",
        opt=access("admin"),
    )
    def result(
        self, kb_id: str, job_id: str, tune_service: TuneService, job_service: JobService, caller: Caller
    ) -> TuneOut:
        found = tune_service.result(kb_id, job_id)
        return TuneOut(job=job_service.get(job_id, caller), result=found)

    @post(
        "/tune/{job_id:str}/apply",
        status_code=200,
        sync_to_thread=True,
        summary="Apply a tune's recommendation as a new settings version",
        description=APPLY_DESCRIPTION,
        opt=access("admin"),
    )
    def apply(
        self, kb_id: str, job_id: str, tune_service: TuneService, caller: Caller, data: ChangeReason | None = None
    ) -> SettingsVersionOut:
        return tune_service.apply(kb_id, job_id, caller.key_id, (data or ChangeReason()).reason)

    @get(
        "/settings/versions",
        sync_to_thread=True,
        summary="The versions of the KB's retrieval settings, newest first: who, when, why",
        opt=access("read"),
        response_headers=PAGE_HEADERS,
    )
    def versions(
        self,
        *,
        kb_id: str,
        request: Request[Any, Any, Any],
        settings_version_service: SettingsVersionService,
        limit: Limit = MAX_PAGE,
        offset: Offset = 0,
    ) -> Response[list[SettingsVersionOut]]:
        return paged_response(settings_version_service.list(kb_id, PageRequest(limit, offset)), request)

    @post(
        "/settings/versions/{version:int}/revert",
        status_code=200,
        sync_to_thread=True,
        summary="Bring back the retrieval settings of a version, as a new version",
        description=REVERT_DESCRIPTION,
        opt=access("admin"),
    )
    def revert(
        self,
        kb_id: str,
        version: VersionNumber,
        settings_version_service: SettingsVersionService,
        caller: Caller,
        data: ChangeReason | None = None,
    ) -> SettingsVersionOut:
        return settings_version_service.revert(kb_id, version, caller.key_id, (data or ChangeReason()).reason)
