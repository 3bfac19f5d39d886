"""Routes of a KB's documents: upload (multipart or JSON), batch upload, list, read, change, retry, delete."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from anyio.to_thread import run_sync
from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.datastructures import UploadFile
from litestar.params import Parameter
from pydantic import ValidationError

from ragkb_api.access import Caller
from ragkb_api.documents.schemas import (
    BatchAccepted,
    DocumentAccepted,
    DocumentFields,
    DocumentOut,
    DocumentPatch,
    TextDocumentBatch,
    TextDocumentCreate,
)
from ragkb_api.documents.service import DocumentFilters, DocumentService, PreparedUpload, Upload
from ragkb_api.fields import MAX_LABEL_CHARS
from ragkb_api.paging import MAX_PAGE, PAGE_HEADERS, Limit, Offset, PageRequest, paged_response
from ragkb_core.contracts import DocType
from ragkb_core.errors import InvalidInput, RagkbError, UnsupportedMediaType
from ragkb_http import access, decode_json, refuse_nul

StatusFilter = Literal["pending", "processing", "done", "failed"]
UPLOAD_DESCRIPTION = """Add a document, or a new version of one (same `source_id`).

Either `multipart/form-data` with `file` and optional `source_id`, `title`, `labels` (JSON array or
comma-separated), `metadata` (JSON object), `doc_type`; or `application/json` with `text` and the same
optional fields. Answers 202 with the document; `unchanged: true` when the content equals the live version."""
BATCH_DESCRIPTION = """Add up to `max_batch_documents` (default 100) text documents, or new versions, in one request:
`{"documents": [{text, source_id?, title?, labels?, metadata?, doc_type?}, ...]}`, each item as the JSON upload
takes it. Each item is accepted or refused on its own: 200 with `accepted`, `failed` and one result per item in
order, `document` (as the single upload answers it) or `error` (the problem a single upload would have
answered). A batch counts as one request for the rate limit; its body has the single upload's size limit. An
unknown KB, one being deleted, or a body that is not a batch refuses the whole request."""


class DocumentController(Controller):
    path = "/v1/knowledge-bases/{kb_id:str}/documents"
    tags = ["documents"]

    @post("/", status_code=202, summary="Upload a document", description=UPLOAD_DESCRIPTION, opt=access("write"))
    async def upload(
        self, kb_id: str, request: Request[Any, Any, Any], document_service: DocumentService, caller: Caller
    ) -> DocumentAccepted:
        fields, upload = await _read_upload(request)
        # Hashing, writing the blob and the database are blocking: keep them off the event loop.
        return await run_sync(document_service.accept, kb_id, fields, upload, caller)

    @post(
        "/batch",
        status_code=200,
        summary="Upload several text documents at once",
        description=BATCH_DESCRIPTION,
        opt=access("write"),
    )
    async def upload_batch(
        self, kb_id: str, request: Request[Any, Any, Any], document_service: DocumentService, caller: Caller
    ) -> BatchAccepted:
        if request.content_type[0] != "application/json":
            raise UnsupportedMediaType(
                f"a batch is application/json, not {request.content_type[0] or 'no content type'}",
                supported_media_types=["application/json"],
            )
        batch = _validate(TextDocumentBatch, _json_body(await request.body()), "the batch is not valid")
        items = [_prepared_or_error(raw) for raw in batch.documents]
        return await run_sync(document_service.accept_batch, kb_id, items, caller)

    @get(
        "/",
        sync_to_thread=True,
        summary="List documents (by status, label or doc_type), a page at a time",
        opt=access("read"),
        response_headers=PAGE_HEADERS,
    )
    def list_all(
        self,
        *,
        kb_id: str,
        request: Request[Any, Any, Any],
        document_service: DocumentService,
        caller: Caller,
        status: Annotated[StatusFilter | None, Parameter(query="status")] = None,
        label: Annotated[str | None, Parameter(query="label", max_length=MAX_LABEL_CHARS)] = None,
        doc_type: Annotated[DocType | None, Parameter(query="doc_type")] = None,
        limit: Limit = MAX_PAGE,
        offset: Offset = 0,
    ) -> Response[list[DocumentOut]]:
        filters = DocumentFilters(status=status, label=label, doc_type=doc_type)
        page = document_service.list(kb_id, filters, caller, PageRequest(limit, offset))
        return paged_response(page, request)

    @get(
        "/{document_id:str}",
        sync_to_thread=True,
        summary="Get a document's status, version and timings",
        opt=access("read"),
    )
    def get_one(self, kb_id: str, document_id: str, document_service: DocumentService, caller: Caller) -> DocumentOut:
        return document_service.get(kb_id, document_id, caller)

    @patch(
        "/{document_id:str}",
        sync_to_thread=True,
        summary="Change title, source_id, labels or metadata",
        opt=access("write"),
    )
    def update(
        self, kb_id: str, document_id: str, data: DocumentPatch, document_service: DocumentService, caller: Caller
    ) -> DocumentOut:
        return document_service.update(kb_id, document_id, data, caller)

    @post(
        "/{document_id:str}/retry",
        status_code=202,
        sync_to_thread=True,
        summary="Queue a failed document again",
        opt=access("write"),
    )
    def retry(self, kb_id: str, document_id: str, document_service: DocumentService, caller: Caller) -> DocumentOut:
        return document_service.retry(kb_id, document_id, caller)

    @delete(
        "/{document_id:str}",
        status_code=204,
        sync_to_thread=True,
        summary="Delete a document and its chunks",
        opt=access("write"),
    )
    def remove(self, kb_id: str, document_id: str, document_service: DocumentService, caller: Caller) -> None:
        document_service.delete(kb_id, document_id, caller)


async def _read_upload(request: Request[Any, Any, Any]) -> tuple[DocumentFields, Upload]:
    content_type = request.content_type[0]
    if content_type == "multipart/form-data":
        return await _read_multipart(request)
    if content_type == "application/json":
        return _read_json(await request.body())
    raise UnsupportedMediaType(
        f"send multipart/form-data or application/json, not {content_type or 'no content type'}",
        supported_media_types=["multipart/form-data", "application/json"],
    )


async def _read_multipart(request: Request[Any, Any, Any]) -> tuple[DocumentFields, Upload]:
    form = await request.form()
    file = form.get("file")
    if not isinstance(file, UploadFile):
        raise InvalidInput("multipart upload needs a `file` part")
    raw: dict[str, Any] = {key: form.get(key) for key in ("source_id", "title", "doc_type") if form.get(key)}
    refuse_nul([raw, form.get("labels"), file.filename])
    raw["labels"] = _parse_labels(form.get("labels"))
    raw["metadata"] = _parse_json_object(form.get("metadata"), "metadata")
    fields = _validate(DocumentFields, raw)
    data = await file.read()
    return fields, Upload(data=data, filename=_clean_filename(file.filename), declared_type=file.content_type)


def _read_json(body: bytes) -> PreparedUpload:
    return _text_document(_json_body(body))


def _json_body(body: bytes) -> Any:
    return decode_json(body)


def _text_document(raw: Any) -> PreparedUpload:
    document = _validate(TextDocumentCreate, raw)
    fields = DocumentFields.model_validate(document.model_dump(exclude={"text"}))
    return fields, Upload(data=document.text.encode("utf-8"), filename=None, declared_type="text/plain")


def _prepared_or_error(raw: Any) -> PreparedUpload | RagkbError:
    """A batch item read as a single JSON upload is; its error is kept for its own result, not raised."""
    try:
        return _text_document(raw)
    except RagkbError as exc:
        return exc


def _validate(model: Any, raw: Any, message: str = "the document fields are not valid") -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        errors = [{"loc": list(e["loc"]), "message": e["msg"]} for e in exc.errors()]
        raise InvalidInput(message, errors=errors) from exc


def _parse_labels(value: Any) -> list[str]:
    if not value:
        return []
    text = str(value).strip()
    if text.startswith("["):
        parsed = _parse_json(text, "labels")
        if not isinstance(parsed, list) or not all(isinstance(item, str) for item in parsed):
            raise InvalidInput("labels must be a JSON array of strings or a comma-separated list")
        return parsed
    return [label.strip() for label in text.split(",") if label.strip()]


def _parse_json_object(value: Any, name: str) -> dict[str, Any]:
    if not value:
        return {}
    parsed = _parse_json(str(value), name)
    if not isinstance(parsed, dict):
        raise InvalidInput(f"{name} must be a JSON object")
    return parsed


def _parse_json(text: str, name: str) -> Any:
    try:
        return decode_json(text)
    except InvalidInput as exc:
        raise InvalidInput(f"{name} is not valid JSON") from exc


def _clean_filename(filename: str | None) -> str | None:
    # Keep only the last path component: a client's directory layout is not ours to store.
    if not filename:
        return None
    return filename.replace("\\", "/").rsplit("/", 1)[-1][:255] or None
