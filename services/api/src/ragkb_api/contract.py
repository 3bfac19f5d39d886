"""The OpenAPI document completed with what Litestar cannot infer from the handlers.

Litestar documents each operation's success answer and a 400 in its own error shape. ragkb answers every
error as RFC 9457 problem details (ragkb_http.problems), so the document is completed once, here: each
authenticated operation lists 401/403/422/429 (and 404, 409, 413, 415 where they can occur) as
`application/problem+json`; the job event stream is `text/event-stream`, an original a file; and the three
bodies that handlers read themselves (upload, batch, question-set upload: JSON or multipart; a restore's
archive) are described, so
that a client generated from the document sends what the server accepts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ragkb_api.documents.schemas import TextDocumentBatch, TextDocumentCreate
from ragkb_api.evaluations.schemas import QuestionSetCreate
from ragkb_http.problems import PROBLEM_MEDIA_TYPE

PROBLEM_SCHEMA = "Problem"
ERROR_DESCRIPTIONS = {
    "400": "The request could not be read (problem details)",
    "401": "No key, or one that is unknown, revoked or expired",
    "403": "The key may not do this (its role or grant), or a console request without its CSRF token",
    "404": "Something the request names does not exist or is not the key's to see",
    "409": "The request conflicts with the current state (a KB being deleted, a re-index running, a name taken)",
    "413": "The body is larger than the server accepts",
    "415": "The body's media type is not one this operation reads",
    "422": "Invalid input: a parameter or body that is malformed or out of bounds (problem details with `errors`)",
    "429": "The key spent its rate limit (or holds its most event streams): retry after `Retry-After` seconds",
    "502": "Every knowledge base searched is external and none answered (one of several that does not answer "
    "only marks the answer `degraded`)",
}
WRITE_METHODS = ("post", "put", "patch", "delete")
DIFY_PATH = "/retrieval"
EVENTS_PATH = "/v1/jobs/{job_id}/events"
ORIGINAL_PATH = "/v1/knowledge-bases/{kb_id}/documents/{document_id}/original"
UPLOAD_PATH = "/v1/knowledge-bases/{kb_id}/documents"
BATCH_PATH = "/v1/knowledge-bases/{kb_id}/documents/batch"
QUESTION_SETS_PATH = "/v1/knowledge-bases/{kb_id}/question-sets"
RESTORE_PATH = "/v1/knowledge-bases/restore"
# Operations that search KBs' passages, so may reach an external KB (502 when none of the KBs searched answers).
SEARCHING_PATHS = ("/v1/search", "/v1/tools/", "/v1/context", "/mcp", DIFY_PATH, "/search-test", "/evaluations")


def complete_contract(document: dict[str, Any]) -> dict[str, Any]:
    """`document` (Litestar's OpenAPI document as a dict) completed in place; returned for convenience."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas[PROBLEM_SCHEMA] = _problem_schema()
    _describe_read_bodies(document["paths"], schemas)
    for path, item in document["paths"].items():
        for method, operation in item.items():
            _document_errors(path, method, operation)
    _describe_media(document["paths"])
    return document


def _document_errors(path: str, method: str, operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    if operation.get("security") == [{}]:  # public: /health, /ready
        return
    for status in _possible_errors(path, method, operation):
        if path == DIFY_PATH and status in responses:
            continue  # Dify's own error shape, documented on its route
        responses[status] = _problem_response(status)


def _possible_errors(path: str, method: str, operation: dict[str, Any]) -> list[str]:
    has_body = "requestBody" in operation
    names_things = has_body or "{" in path
    statuses = ["400", "401", "403", "422", "429"]
    statuses += ["404"] if names_things else []
    statuses += ["409"] if method in WRITE_METHODS else []
    statuses += ["413", "415"] if has_body else []
    statuses += ["502"] if method == "post" and any(marker in path for marker in SEARCHING_PATHS) else []
    return statuses


def _problem_response(status: str) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": ERROR_DESCRIPTIONS[status],
        "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": f"#/components/schemas/{PROBLEM_SCHEMA}"}}},
    }
    if status == "429":
        response["headers"] = {
            "Retry-After": {"description": "whole seconds to wait", "required": True, "schema": {"type": "integer"}}
        }
    return response


def _problem_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "RFC 9457 problem details; some carry more members (`errors`, `retry_after_s`, …).",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "instance": {"type": "string"},
        },
        "additionalProperties": True,
    }


def _describe_media(paths: dict[str, Any]) -> None:
    events = paths[EVENTS_PATH]["get"]["responses"]["200"]
    events["description"] = "Server-sent events: `progress` for each settled item, then `complete` (or `error`)"
    events["content"] = {"text/event-stream": {"schema": {"type": "string"}}}
    original = paths[ORIGINAL_PATH]["get"]["responses"]["200"]
    original["content"] = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}


def _describe_read_bodies(paths: dict[str, Any], schemas: dict[str, Any]) -> None:
    upload_form = {
        "type": "object",
        "required": ["file"],
        "properties": {
            "file": {"type": "string", "format": "binary"},
            "source_id": {"type": "string"},
            "title": {"type": "string"},
            "labels": {"type": "string", "description": "a JSON array of strings, or comma-separated"},
            "metadata": {"type": "string", "description": "a JSON object"},
            "doc_type": {"type": "string"},
        },
    }
    question_set_form = {
        "type": "object",
        "required": ["name", "queries", "qrels"],
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "queries": {"type": "string", "format": "binary", "description": "BEIR queries.jsonl"},
            "qrels": {"type": "string", "format": "binary", "description": "BEIR qrels/<split>.tsv"},
            "quality_gate": {"type": "string", "enum": ["true", "false"]},
        },
    }
    restore_form = {
        "type": "object",
        "required": ["file"],
        "properties": {
            "file": {"type": "string", "format": "binary", "description": "an archive from …/backup (.tar.gz)"},
            "name": {"type": "string", "description": "the new KB's name (default: the backed-up KB's)"},
        },
    }
    paths[UPLOAD_PATH]["post"]["requestBody"] = _body(
        {"multipart/form-data": upload_form, "application/json": _ref(TextDocumentCreate, schemas)}
    )
    paths[BATCH_PATH]["post"]["requestBody"] = _body({"application/json": _ref(TextDocumentBatch, schemas)})
    paths[QUESTION_SETS_PATH]["post"]["requestBody"] = _body(
        {"application/json": _ref(QuestionSetCreate, schemas), "multipart/form-data": question_set_form}
    )
    paths[RESTORE_PATH]["post"]["requestBody"] = _body({"multipart/form-data": restore_form})


def _body(media: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"required": True, "content": {media_type: {"schema": schema} for media_type, schema in media.items()}}


def _ref(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, Any]:
    """A reference to `model`'s schema, added (with the models it uses) to the document's components."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in schema.pop("$defs", {}).items():
        schemas.setdefault(name, definition)
    schemas.setdefault(model.__name__, schema)
    return {"$ref": f"#/components/schemas/{model.__name__}"}
