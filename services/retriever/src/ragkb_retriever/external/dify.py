"""An external KB behind Dify's External Knowledge API: `POST {endpoint}/retrieval` with a Bearer key and
`{knowledge_id, query, retrieval_setting: {top_k, score_threshold}, metadata_condition?}`, answered with
`{records: [{content, score, title, metadata}]}` (another ragkb answers so: ragkb_api.dify).

Called from the retriever, not the api, so that its records are reranked, cut and merged with every other KB's
in one place (ragkb_retriever.searching), under the same stages and `explain` as a native KB's passages."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from pydantic import BaseModel, Field, ValidationError

from ragkb_core.errors import ExternalUnavailable, InvalidInput
from ragkb_core.external import ExternalDifyConfig, ExternalProbe, ExternalTarget
from ragkb_retriever.external.passages import EXTERNAL_NAMESPACE, passage_payload, scalar_metadata, string_list
from ragkb_retriever.external.scope import DifyScope
from ragkb_retriever.index.port import IndexHit
from ragkb_retriever.settings import ExternalSettings

# Dify's retrieval_setting.top_k: ragkb's own endpoint takes at most 100, as Dify's UI offers.
MAX_DIFY_TOP_K = 100
# Where a record's metadata may say which document it comes from (ragkb's Dify answer: source_id).
SOURCE_KEYS = ("source_id", "source", "url", "path", "document_id")
PROBE_QUERY = "ragkb connection check"


class DifyRecord(BaseModel):
    content: str
    score: float = 0.0
    title: str = ""
    metadata: dict[str, Any] | None = Field(default=None)


class DifyAnswer(BaseModel):
    records: list[DifyRecord]


class ExternalDify:
    def __init__(self, settings: ExternalSettings) -> None:
        self._http = httpx.Client(timeout=settings.timeout_s, follow_redirects=False)

    def search(
        self, kb_id: str, target: ExternalTarget, query: str, *, top_k: int, floor: float, scope: DifyScope
    ) -> list[IndexHit]:
        """The endpoint's records as hits, best first, each admitted by the scope (records it does not admit are
        left out: the remote cannot widen what the caller sees)."""
        body: dict[str, Any] = {
            "knowledge_id": _dify(target).knowledge_id,
            "query": query,
            "retrieval_setting": {"top_k": min(top_k, MAX_DIFY_TOP_K), "score_threshold": floor},
        }
        if (condition := scope.condition()) is not None:
            body["metadata_condition"] = condition
        records = self._post(target, body).records
        return [_hit(kb_id, record) for record in records if scope.admits(record.metadata or {})]

    def probe(self, target: ExternalTarget) -> ExternalProbe:
        """The endpoint accepts the key and the knowledge id (a search of one record)."""
        config = _dify(target)
        body = {
            "knowledge_id": config.knowledge_id,
            "query": PROBE_QUERY,
            "retrieval_setting": {"top_k": 1, "score_threshold": 0.0},
        }
        self._post(target, body)
        return ExternalProbe(kind="dify")

    def close(self) -> None:
        self._http.close()

    def _post(self, target: ExternalTarget, body: dict[str, Any]) -> DifyAnswer:
        config = _dify(target)
        url = f"{config.endpoint}/retrieval"
        headers = {"Authorization": f"Bearer {target.api_key.get_secret_value()}"} if target.api_key else {}
        try:
            response = self._http.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise ExternalUnavailable(f"{url} did not answer: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise ExternalUnavailable(f"{url} answered {response.status_code}: {_error_message(response)}")
        try:
            return DifyAnswer.model_validate_json(response.content)
        except ValidationError as exc:
            raise ExternalUnavailable(f"{url} answered no Dify records: {exc.errors()[0]['msg']}") from None


def _dify(target: ExternalTarget) -> ExternalDifyConfig:
    if not isinstance(target.config, ExternalDifyConfig):
        raise InvalidInput("not an external Dify endpoint")
    return target.config


def _error_message(response: httpx.Response) -> str:
    """Dify's `error_msg` (with its code), or the start of whatever else was answered."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict) and "error_msg" in body:
        return f"{body.get('error_code')} {body['error_msg']}"
    return str(body)[:200]


def _source_of(record: DifyRecord, metadata: dict[str, Any]) -> str:
    for key in SOURCE_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return record.title or f"content:{uuid.uuid5(EXTERNAL_NAMESPACE, record.content).hex}"


def _hit(kb_id: str, record: DifyRecord) -> IndexHit:
    metadata = record.metadata or {}
    page = metadata.get("page")
    passage = passage_payload(
        kb_id,
        text=record.content,
        title=record.title,
        source=_source_of(record, metadata),
        labels=string_list(metadata.get("labels")),
        metadata=scalar_metadata(metadata),
        heading_path=string_list(metadata.get("heading_path")),
        page=page if isinstance(page, int) and not isinstance(page, bool) and page > 0 else None,
    )
    # Dify's score is 0–1 by its protocol: the record's relevance, and its score in this KB's own order.
    chunk_id = str(metadata.get("chunk_id") or uuid.uuid5(EXTERNAL_NAMESPACE, f"{kb_id}\x00{record.content}"))
    return IndexHit(id=chunk_id, score=min(max(record.score, 0.0), 1.0), payload=passage)
