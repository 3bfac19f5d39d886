"""Routes of question sets (JSON or BEIR files) and evaluations of a KB."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from anyio.to_thread import run_sync
from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.datastructures import UploadFile
from litestar.params import Parameter
from pydantic import ValidationError

from ragkb_api.access import Caller
from ragkb_api.evaluations.question_sets import QuestionSetService
from ragkb_api.evaluations.schemas import (
    BeirExport,
    EvaluationOut,
    EvaluationRequest,
    QuestionSetCreate,
    QuestionSetDetail,
    QuestionSetOut,
    QuestionSetPatch,
)
from ragkb_api.evaluations.service import EvaluationService
from ragkb_api.paging import MAX_PAGE, PAGE_HEADERS, Limit, Offset, PageRequest, paged_response
from ragkb_core.errors import InvalidInput, UnsupportedMediaType
from ragkb_http import access, decode_json, refuse_nul

CREATE_DESCRIPTION = """Save queries with relevance judgements for this KB.

Either `application/json` `{name, queries: [{id, text}], qrels: {query_id: {source_id: grade}}, quality_gate?}`
(every query judged at least once), or a BEIR folder's files as `multipart/form-data`: `name`, `queries`
(queries.jsonl), `qrels` (qrels/<split>.tsv) and optional `quality_gate` (true/false); only the queries the
qrels judge are kept. Malformed files are refused with 422 naming the file and line."""
EVALUATE_DESCRIPTION = """Run a question set through search under `mode` and `settings` and score it: nDCG@10,
Recall@100 (and Recall@depth), MRR@10, means and per query; with `compare`, the same under other settings,
with the difference per metric and the per-query wins, losses and ties. Synchronous: about 25 ms per query
and run. Each search counts against the key's rate limit: the evaluation spends one token per query and run
before it starts, and is refused with 429 (Retry-After) while the key lacks them."""


class QuestionSetController(Controller):
    path = "/v1/knowledge-bases/{kb_id:str}/question-sets"
    tags = ["evaluation"]

    @post("/", status_code=201, summary="Save a question set", description=CREATE_DESCRIPTION, opt=access("write"))
    async def create(
        self, kb_id: str, request: Request[Any, Any, Any], question_set_service: QuestionSetService
    ) -> QuestionSetOut:
        return await _create(request, kb_id, question_set_service)

    @get(
        "/",
        sync_to_thread=True,
        summary="The KB's question sets, a page at a time",
        opt=access("read"),
        response_headers=PAGE_HEADERS,
    )
    def list_all(
        self,
        *,
        kb_id: str,
        request: Request[Any, Any, Any],
        question_set_service: QuestionSetService,
        limit: Limit = MAX_PAGE,
        offset: Offset = 0,
    ) -> Response[list[QuestionSetOut]]:
        return paged_response(question_set_service.list(kb_id, PageRequest(limit, offset)), request)

    @get(
        "/{set_id:str}",
        sync_to_thread=True,
        summary="A question set with its queries and judgements (`?format=beir`: as BEIR file contents)",
        opt=access("read"),
    )
    def get_one(
        self,
        kb_id: str,
        set_id: str,
        question_set_service: QuestionSetService,
        export_format: Annotated[Literal["json", "beir"], Parameter(query="format")] = "json",
    ) -> QuestionSetDetail | BeirExport:
        if export_format == "beir":
            return question_set_service.export_beir(kb_id, set_id)
        return question_set_service.get(kb_id, set_id)

    @patch(
        "/{set_id:str}",
        sync_to_thread=True,
        summary="Rename a set or make it the KB's quality gate",
        opt=access("write"),
    )
    def update(
        self, kb_id: str, set_id: str, data: QuestionSetPatch, question_set_service: QuestionSetService
    ) -> QuestionSetOut:
        return question_set_service.update(kb_id, set_id, data)

    @delete("/{set_id:str}", status_code=204, sync_to_thread=True, summary="Delete a question set", opt=access("write"))
    def remove(self, kb_id: str, set_id: str, question_set_service: QuestionSetService) -> None:
        question_set_service.delete(kb_id, set_id)


class EvaluationController(Controller):
    path = "/v1/knowledge-bases/{kb_id:str}/evaluations"
    tags = ["evaluation"]

    @post(
        "/",
        status_code=200,
        sync_to_thread=True,
        summary="Evaluate retrieval on a question set (and compare two settings)",
        description=EVALUATE_DESCRIPTION,
        opt=access("read"),
    )
    def evaluate(
        self, kb_id: str, data: EvaluationRequest, evaluation_service: EvaluationService, caller: Caller
    ) -> EvaluationOut:
        return evaluation_service.evaluate(kb_id, data, caller)


async def _create(request: Request[Any, Any, Any], kb_id: str, service: QuestionSetService) -> QuestionSetOut:
    content_type = request.content_type[0]
    if content_type == "multipart/form-data":
        form = await request.form()
        files = {part: form.get(part) for part in ("queries", "qrels")}
        missing = [part for part, file in files.items() if not isinstance(file, UploadFile)]
        if missing:
            raise InvalidInput(f"a BEIR upload needs the files {', '.join(missing)} (queries.jsonl, qrels tsv)")
        name, gate = _form_name(form.get("name")), _form_flag(form.get("quality_gate"))
        queries, qrels = [await _read_file(files[part]) for part in ("queries", "qrels")]
        return await run_sync(service.create_from_beir, kb_id, name, queries, qrels, gate)
    if content_type == "application/json":
        return await run_sync(service.create_from_json, kb_id, _validate_json(await request.body()))
    raise UnsupportedMediaType(
        f"send application/json or multipart/form-data, not {content_type or 'no content type'}",
        supported_media_types=["application/json", "multipart/form-data"],
    )


def _form_name(value: Any) -> str:
    name = refuse_nul(str(value or "").strip())
    if not name or len(name) > 200:
        raise InvalidInput("a BEIR upload needs a `name` of 1 to 200 characters")
    return name


def _form_flag(value: Any) -> bool:
    flag = str(value or "false").strip().lower()
    if flag not in ("true", "false"):
        raise InvalidInput("quality_gate must be true or false")
    return flag == "true"


async def _read_file(file: Any) -> bytes:
    data: bytes = await file.read()
    return data


def _validate_json(body: bytes) -> QuestionSetCreate:
    try:
        return QuestionSetCreate.model_validate(decode_json(body))
    except ValidationError as exc:
        errors = [{"loc": list(e["loc"]), "message": e["msg"]} for e in exc.errors()[:20]]
        raise InvalidInput("the question set is not valid", errors=errors) from exc
