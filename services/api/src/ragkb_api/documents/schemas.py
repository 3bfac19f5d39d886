"""Request and response shapes of documents: uploads, batches, patches."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_core.core_schema import ValidatorFunctionWrapHandler

from ragkb_api.fields import MAX_LABEL_CHARS, MAX_LABELS, DocumentMetadata, UtcDateTime
from ragkb_core.contracts import DocType


class DocumentFields(BaseModel):
    """Fields shared by JSON and multipart uploads."""

    source_id: str | None = Field(default=None, min_length=1, max_length=1024)
    title: str | None = Field(default=None, max_length=1024)
    labels: list[str] = Field(default_factory=list, max_length=MAX_LABELS)
    metadata: DocumentMetadata = Field(default_factory=dict)
    doc_type: DocType = "knowledge"

    @field_validator("labels")
    @classmethod
    def _labels_are_short(cls, labels: list[str]) -> list[str]:
        if any(not label.strip() or len(label) > MAX_LABEL_CHARS for label in labels):
            raise ValueError(f"labels must be non-blank and at most {MAX_LABEL_CHARS} characters")
        return labels


class DocumentPatch(BaseModel):
    """Labels, metadata and source_id are applied to the index payload in place, nothing is re-embedded; a new
    title also re-indexes the document (it is embedded and keyword-indexed: DocumentLedger.change_fields).

    `doc_type` is deliberately not a field: a document never changes between knowledge and reference in
    place (a reference is the authoritative original). A `doc_type` that differs from the document's own
    is answered 409 (delete and register again); the same value is accepted and changes nothing."""

    title: str | None = Field(default=None, min_length=1, max_length=1024)
    source_id: str | None = Field(default=None, min_length=1, max_length=1024)
    labels: list[str] | None = Field(default=None, max_length=MAX_LABELS)
    metadata: DocumentMetadata | None = None

    @field_validator("labels")
    @classmethod
    def _labels_are_short(cls, labels: list[str] | None) -> list[str] | None:
        if labels is not None:
            DocumentFields._labels_are_short(labels)
        return labels

    # The `doc_type` the request carried, if any: not a field (see above), only kept to refuse it clearly.
    _requested_doc_type: Any = None

    @model_validator(mode="wrap")
    @classmethod
    def _remember_doc_type(cls, raw: Any, handler: ValidatorFunctionWrapHandler) -> DocumentPatch:
        patch: DocumentPatch = handler(raw)
        if isinstance(raw, dict):
            patch._requested_doc_type = raw.get("doc_type")
        return patch

    @property
    def requested_doc_type(self) -> Any:
        return self._requested_doc_type

    def changes(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class TextDocumentCreate(DocumentFields):
    text: str = Field(min_length=1)


class RangeProgress(BaseModel):
    done: int
    total: int


class DocumentOut(BaseModel):
    id: str
    knowledge_base_id: str
    source_id: str
    title: str
    filename: str | None
    media_type: str
    size_bytes: int
    sha256: str
    labels: list[str]
    metadata: dict[str, Any]
    doc_type: str
    status: str
    version: int
    indexed_version: int | None
    chunk_count: int
    error: str | None
    attempts: int
    stage_timings: dict[str, Any]
    ingest_report: dict[str, Any]
    # A long document built in page ranges on every free worker process: ranges built of ranges in all (its
    # ingest job shows the same); null when its newest run was not split.
    ranges: RangeProgress | None = None
    created_at: UtcDateTime
    updated_at: UtcDateTime
    indexed_at: UtcDateTime | None


class DocumentAccepted(DocumentOut):
    # True when the upload equals the live version: nothing was queued.
    unchanged: bool = False


class TextDocumentBatch(BaseModel):
    """Several JSON documents (each as the JSON upload takes one) in one request. Items are validated one by
    one, so that one bad item is refused alone."""

    documents: list[Any] = Field(min_length=1)


class BatchItemError(BaseModel):
    """Why one item of a batch was refused: the problem details a single upload would have answered."""

    status: int
    title: str
    detail: str
    errors: list[dict[str, Any]] | None = None


class BatchItemResult(BaseModel):
    index: int
    source_id: str | None
    document: DocumentAccepted | None = None
    error: BatchItemError | None = None


class BatchAccepted(BaseModel):
    accepted: int
    failed: int
    # One per item, in the request's order: a document (accepted, or unchanged) or an error.
    results: list[BatchItemResult]
