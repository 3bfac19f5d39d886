"""Typed client of the retriever's internal API, used by the api and the worker."""

from __future__ import annotations

import json
from typing import Any

import httpx
from pydantic import SecretStr

from ragkb_core.contracts import (
    AnalyzeQuery,
    AnalyzeResult,
    ContextQuery,
    ContextResult,
    DocumentBatch,
    DocumentChunks,
    DocumentPoints,
    DocumentWriteResult,
    KbGenerations,
    KbIndexInfo,
    KbPointCensus,
    SearchQuery,
    SearchResult,
)
from ragkb_core.errors import Conflict, ExternalUnavailable, InvalidInput, NotFound, RagkbError, Unavailable
from ragkb_core.external import ExternalProbe, ExternalTarget
from ragkb_core.fusion import LegsQuery, LegsResult
from ragkb_core.kb_settings import KbIndexLayout
from ragkb_core.request_context import REQUEST_ID_HEADER, request_id
from ragkb_core.settings import RetrieverClientSettings

INTERNAL_PREFIX = "/internal/v1"
# Carries RAGKB_SERVICE_TOKEN on every internal call; the retriever refuses internal calls without it.
SERVICE_TOKEN_HEADER = "X-Ragkb-Service-Token"
JSON_CONTENT = {"Content-Type": "application/json"}
# An idle keep-alive connection is closed by the client before the retriever closes it: with both at 5 s (httpx's
# and uvicorn's defaults) a request sent on a connection the retriever was closing at that instant failed with
# ReadError, a 503 for the caller (bench/soak.py met three in 30 s of load).
RETRIEVER_KEEP_ALIVE_S = 75
CLIENT_KEEP_ALIVE_S = 30


class RetrieverClient:
    def __init__(self, settings: RetrieverClientSettings, service_token: SecretStr | None) -> None:
        headers = {SERVICE_TOKEN_HEADER: service_token.get_secret_value()} if service_token else {}
        self._http = httpx.Client(
            base_url=settings.url,
            timeout=settings.timeout_s,
            headers=headers,
            limits=httpx.Limits(keepalive_expiry=CLIENT_KEEP_ALIVE_S),
            event_hooks={"request": [_carry_request_id]},
        )

    def create_kb(
        self, kb_id: str, layout: KbIndexLayout | None = None, *, second_model: str | None = None
    ) -> KbIndexInfo:
        """Create the KB's index (idempotent); `layout` on a Qdrant cluster, fields left out from the defaults;
        `second_model` with room for that model's vectors (KbChunking.second_model)."""
        body = (layout or KbIndexLayout()).model_dump(exclude_none=True)
        params = {} if second_model is None else {"second_model": second_model}
        return KbIndexInfo.model_validate(self._call("PUT", f"/kbs/{kb_id}", json=body, params=params))

    def drop_kb(self, kb_id: str) -> None:
        self._call("DELETE", f"/kbs/{kb_id}")

    # -- generations: a re-index writes into a new one, switches to it, and may switch back ----------

    def create_generation(
        self,
        kb_id: str,
        dense_size: int | None = None,
        *,
        embedding_model: str | None = None,
        second_model: str | None = None,
    ) -> int:
        """A new, empty, not live generation for vectors of `embedding_model` (its dimension), or of
        `dense_size`; neither: the retriever's default model's dimension. `second_model`: with room for that
        model's vectors too (KbChunking.second_model)."""
        body = {"dense_size": dense_size, "embedding_model": embedding_model, "second_model": second_model}
        data = self._call("POST", f"/kbs/{kb_id}/generations", json=body)
        return int(data["generation"])

    def generations(self, kb_id: str) -> KbGenerations:
        return KbGenerations.model_validate(self._call("GET", f"/kbs/{kb_id}/generations"))

    def switch_generation(self, kb_id: str, generation: int) -> tuple[int, int]:
        """Make `generation` live; returns (live, previous), previous being what a rollback switches to."""
        data = self._call("PUT", f"/kbs/{kb_id}/generations/{generation}/live")
        return int(data["live"]), int(data["previous"])

    def drop_generation(self, kb_id: str, generation: int) -> None:
        """Delete a generation that is not live (Conflict when it is; nothing when it does not exist)."""
        self._call("DELETE", f"/kbs/{kb_id}/generations/{generation}")

    # -- documents: the live generation, or the one given --------------------------------------------

    # The points go out as pydantic's own JSON (bytes, UTF-8): dumping them to dicts for httpx's json.dumps took
    # 5.6× the CPU (0.20 against 0.035 ms per short document) and escaped every non-ASCII character.

    def write_document(self, points: DocumentPoints, *, generation: int | None = None) -> DocumentWriteResult:
        path = f"/kbs/{points.kb_id}/documents/{points.document_id}"
        data = self._call(
            "PUT", path, content=points.model_dump_json(), headers=JSON_CONTENT, params=_present(generation=generation)
        )
        return DocumentWriteResult.model_validate(data)

    def write_documents(self, kb_id: str, documents: list[DocumentPoints]) -> DocumentWriteResult:
        """Several documents of one KB in one call and one index upsert (a batch of short documents)."""
        body = DocumentBatch(documents=documents).model_dump_json()
        data = self._call("PUT", f"/kbs/{kb_id}/documents", content=body, headers=JSON_CONTENT)
        return DocumentWriteResult.model_validate(data)

    def delete_document(
        self,
        kb_id: str,
        document_id: str,
        *,
        keep_version: int | None = None,
        only_version: int | None = None,
        generation: int | None = None,
    ) -> None:
        """Delete a document's points: all of them, all but `keep_version`, or only `only_version`."""
        query = _present(keep_version=keep_version, only_version=only_version, generation=generation)
        self._call("DELETE", f"/kbs/{kb_id}/documents/{document_id}", params=query)

    def set_document_payload(
        self, kb_id: str, document_id: str, fields: dict[str, Any], *, generation: int | None = None
    ) -> None:
        """Merge `fields` into the payload of every chunk of the document (metadata-only changes)."""
        path = f"/kbs/{kb_id}/documents/{document_id}"
        self._call("PATCH", path, json=fields, params=_present(generation=generation))

    def document_chunks(self, kb_id: str, document_id: str, version: int, *, offset: int, limit: int) -> DocumentChunks:
        """A page of one document version's passages in the live generation, in document order."""
        query = {"version": version, "offset": offset, "limit": limit}
        data = self._call("GET", f"/kbs/{kb_id}/documents/{document_id}/chunks", params=query)
        return DocumentChunks.model_validate(data)

    def count_points(self, kb_id: str, document_id: str | None = None, *, generation: int | None = None) -> int:
        query = _present(document_id=document_id or None, generation=generation)
        data = self._call("GET", f"/kbs/{kb_id}/count", params=query)
        return int(data["count"])

    def point_census(self, kb_id: str) -> KbPointCensus:
        """The live generation's points counted per document and version."""
        return KbPointCensus.model_validate(self._call("GET", f"/kbs/{kb_id}/points"))

    def export_document(self, kb_id: str, document_id: str, version: int) -> DocumentPoints:
        """One document version's points as written, vectors included."""
        data = self._call("GET", f"/kbs/{kb_id}/documents/{document_id}/points", params={"version": version})
        return DocumentPoints.model_validate(data)

    def search(self, query: SearchQuery) -> SearchResult:
        return SearchResult.model_validate_json(self.search_json(query))

    def search_json(self, query: SearchQuery) -> bytes:
        """The retriever's answer as its JSON (a SearchResult), for a caller that passes it on undecoded."""
        response = self._send("POST", "/search", content=query.model_dump_json(), headers=JSON_CONTENT)
        return response.content

    def probe_external(self, target: ExternalTarget, embedding_model: str | None) -> ExternalProbe:
        """Reach an external KB once (ExternalUnavailable when it does not answer; InvalidInput when its collection
        does not fit `embedding_model`, e.g. another dimension or a vector name it lacks)."""
        body = {"target": target.model_dump(mode="json"), "embedding_model": embedding_model}
        return ExternalProbe.model_validate(self._call("POST", "/external/probe", json=body))

    def legs(self, query: LegsQuery) -> LegsResult:
        """Each question's dense and keyword candidates in one KB (ragkb_core.fusion)."""
        response = self._send("POST", "/legs", content=query.model_dump_json(), headers=JSON_CONTENT)
        return LegsResult.model_validate_json(response.content)

    def analyze(self, query: AnalyzeQuery) -> AnalyzeResult:
        return AnalyzeResult.model_validate(self._call("POST", "/analyze", json=query.model_dump(mode="json")))

    def surrounding(self, kb_id: str, query: ContextQuery) -> ContextResult:
        """A passage of the KB and its neighbours in document order (NotFound when the KB has no such passage)."""
        data = self._call("POST", f"/kbs/{kb_id}/context", json=query.model_dump(mode="json"))
        return ContextResult.model_validate(data)

    def ready(self) -> bool:
        """The retriever answers and accepts this process's service token."""
        try:
            return self._http.get(INTERNAL_PREFIX + "/ready").status_code == 200
        except httpx.HTTPError:
            return False

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._send(method, path, **kwargs)
        return response.json() if response.content else None

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, INTERNAL_PREFIX + path, **kwargs)
        except httpx.HTTPError as exc:
            raise Unavailable(f"retriever unreachable: {type(exc).__name__}") from exc
        if response.status_code >= 400:
            raise _error_from(response)
        return response


def _present(**params: str | int | None) -> dict[str, str | int]:
    """Query parameters without the ones not given."""
    return {name: value for name, value in params.items() if value is not None}


def _error_from(response: httpx.Response) -> RagkbError:
    return error_from_status(response.status_code, response.content)


def error_from_status(status: int, body: bytes) -> RagkbError:
    """Map the retriever's problem details back onto the domain hierarchy (this client's and the async one's)."""
    detail = _problem_detail(body)
    if status == 404:
        return NotFound(detail)
    if status == 409:
        return Conflict(detail)
    if status in (400, 422):
        return InvalidInput(detail)
    if status == 502:
        # The retriever reached for an external KB, which failed: not the retriever's own unavailability.
        return ExternalUnavailable(detail)
    return Unavailable(f"retriever answered {status}: {detail}")


def _problem_detail(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace")
    try:
        problem = json.loads(body)
    except ValueError:
        return text[:200]
    return str(problem.get("detail", text)) if isinstance(problem, dict) else text[:200]


def _carry_request_id(request: httpx.Request) -> None:
    """The retriever logs its part of a request under the caller's request id."""
    current = request_id.get()
    if current:
        request.headers[REQUEST_ID_HEADER] = current
