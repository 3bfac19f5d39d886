"""An HTTP rerank service as a reranker: the common `/rerank` shape that Cohere, Jina, Text Embeddings Inference
and Infinity all serve (RerankerSettings.http_models).

It stands where a local cross-encoder stands (reranking.RerankerPool picks it by name) and keeps the same
promises: scores 0–1 in input order, the request's latency budget as the call's timeout, and every failure (the
service down, slow, refusing the key, answering something else) an outcome without scores that says why, never
an exception. The API key is read from the settings and sent as a Bearer token.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import httpx

from ragkb_retriever.settings import HttpRerankerSpec

logger = logging.getLogger(__name__)


class HttpRerankFailed(Exception):
    """The service gave no usable scores; the message is the search's degraded reason."""


class HttpReranker:
    def __init__(self, name: str, spec: HttpRerankerSpec) -> None:
        self.name = name
        self._spec = spec
        self._client = httpx.Client(headers=_headers(spec))
        self._calls = 0
        self._ms_per_pair: float | None = None

    @property
    def calls(self) -> int:
        return self._calls

    @property
    def ms_per_pair(self) -> float | None:
        return self._ms_per_pair

    def warm_up(self) -> None:
        """Nothing to load: the service holds the model."""

    def score(self, query: str, texts: list[str], budget_ms: int) -> tuple[list[float] | None, str | None]:
        """One score per text, in input order, within `budget_ms` (and the service's own timeout)."""
        timeout_s = min(self._spec.timeout_s, budget_ms / 1000)
        started = time.perf_counter()
        try:
            scores = self._call(query, texts, timeout_s)
        except httpx.TimeoutException:
            return None, f"the reranker {self.name!r} exceeded the budget of {round(timeout_s * 1000)} ms"
        except httpx.HTTPError as error:
            return None, f"the reranker {self.name!r} could not be reached: {type(error).__name__}: {error}"
        except HttpRerankFailed as failure:
            logger.warning("HTTP reranker %r: %s", self.name, failure)
            return None, str(failure)
        self._calls += 1
        self._ms_per_pair = (time.perf_counter() - started) * 1000 / max(1, len(texts))
        return scores, None

    def close(self) -> None:
        self._client.close()

    def _call(self, query: str, texts: list[str], timeout_s: float) -> list[float]:
        body: dict[str, Any] = {"query": query, self._spec.documents_field: texts, "top_n": len(texts)}
        if self._spec.model is not None:
            body["model"] = self._spec.model
        response = self._client.post(str(self._spec.url), json=body, timeout=timeout_s)
        if response.status_code != 200:
            raise HttpRerankFailed(
                f"the reranker {self.name!r} answered HTTP {response.status_code}: {response.text[:200]}"
            )
        return self._scores(response, len(texts))

    def _scores(self, response: httpx.Response, count: int) -> list[float]:
        """The scores in input order from `{results: [{index, relevance_score}]}` (Cohere, Jina, Infinity) or
        `[{index, score}]` (TEI); every passage must have one."""
        try:
            body = response.json()
            entries = body["results"] if isinstance(body, dict) else body
            by_index = {
                int(entry["index"]): float(entry.get("relevance_score", entry.get("score"))) for entry in entries
            }
        except (ValueError, KeyError, TypeError) as error:
            raise HttpRerankFailed(f"the reranker {self.name!r} answered an unknown shape: {error!r}") from error
        if sorted(by_index) != list(range(count)):
            raise HttpRerankFailed(f"the reranker {self.name!r} scored {len(by_index)} of {count} passages")
        scores = [by_index[position] for position in range(count)]
        if self._spec.logits:
            return [_sigmoid(score) for score in scores]
        if any(not 0.0 <= score <= 1.0 for score in scores):
            raise HttpRerankFailed(
                f"the reranker {self.name!r} answered scores outside 0–1 (set `logits: true` for a service that "
                "answers raw logits)"
            )
        return scores


def _headers(spec: HttpRerankerSpec) -> dict[str, str]:
    if spec.api_key is None:
        return {}
    return {"Authorization": f"Bearer {spec.api_key.get_secret_value()}"}


def _sigmoid(logit: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(logit, 700.0), -700.0)))
