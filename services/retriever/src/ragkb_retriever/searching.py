"""Search: embed and analyse the query once, run the legs per KB inside the engine, merge KBs."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from ragkb_analyzer import Bm25Encoder
from ragkb_core.contracts import ContextQuery, ContextResult, SearchHit, SearchQuery, SearchResult, SparseTerms
from ragkb_core.errors import NotFound
from ragkb_retriever.index.filters import ordinal_window_filter
from ragkb_retriever.index.port import IndexHit, LegResults, VectorIndex
from ragkb_retriever.settings import SearchSettings


class QueryEncoder(Protocol):
    def embed_query(self, text: str) -> list[float]: ...


def qdrant_rrf_k(paper_k: int) -> int:
    """Qdrant ranks from 0 (score 1/(k + rank0)); the paper ranks from 1, so paper k 60 is Qdrant k 61."""
    return paper_k + 1


class SearchService:
    def __init__(self, index: VectorIndex, encoder: QueryEncoder, bm25: Bm25Encoder, settings: SearchSettings) -> None:
        self._index = index
        self._encoder = encoder
        self._bm25 = bm25
        self._settings = settings
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="kb-search")

    def search(self, query: SearchQuery) -> SearchResult:
        started = time.perf_counter()
        dense = self._encoder.embed_query(query.query) if query.mode != "keyword" else None
        sparse = self._bm25.encode_query(query.query) if query.mode != "semantic" else None
        per_kb = self._search_kbs(query, dense, sparse)
        hits = sorted((hit for kb_hits in per_kb for hit in kb_hits), key=lambda hit: -hit.score)
        took_ms = (time.perf_counter() - started) * 1000
        return SearchResult(results=hits[: query.top_k], took_ms=round(took_ms, 2))

    def _search_kbs(
        self, query: SearchQuery, dense: list[float] | None, sparse: SparseTerms | None
    ) -> list[list[SearchHit]]:
        def one_kb(kb_id: str) -> list[SearchHit]:
            legs = self._index.search(
                kb_id,
                dense=dense,
                sparse=sparse,
                scope=query.scope,
                limit=query.top_k,
                candidate_limit=query.top_k * self._settings.candidate_multiplier,
                rrf_k=qdrant_rrf_k(self._settings.rrf_k),
            )
            return _annotated_hits(kb_id, legs)

        if len(query.knowledge_base_ids) == 1:
            return [one_kb(query.knowledge_base_ids[0])]
        return list(self._pool.map(one_kb, query.knowledge_base_ids))

    def surrounding(self, kb_id: str, query: ContextQuery) -> ContextResult:
        """The passage `chunk_id` of KB `kb_id` and its neighbours: same document, same version, by ordinal."""
        found = self._index.retrieve(kb_id, query.chunk_id)
        if found is None:
            raise NotFound(f"passage {query.chunk_id} does not exist", chunk_id=query.chunk_id)
        payload = found.payload
        ordinal = int(payload["ordinal"])
        window = range(max(0, ordinal - query.before), ordinal + query.after + 1)
        spec = ordinal_window_filter(kb_id, payload["document_id"], int(payload["version"]), window)
        hits = self._index.scroll(kb_id, spec, limit=len(window))
        passages = sorted((_hit(kb_id, hit, None, None) for hit in hits), key=lambda hit: hit.ordinal)
        return ContextResult(passages=passages)

    def close(self) -> None:
        self._pool.shutdown(wait=False)


def _annotated_hits(kb_id: str, legs: LegResults) -> list[SearchHit]:
    """Fused hits with the rank and score each one had in the dense and keyword legs."""
    dense_ranks = _ranks(legs.dense)
    keyword_ranks = _ranks(legs.keyword)
    return [_hit(kb_id, hit, dense_ranks.get(hit.id), keyword_ranks.get(hit.id)) for hit in legs.fused]


def _ranks(hits: Sequence[IndexHit]) -> dict[str, tuple[int, float]]:
    return {hit.id: (rank, hit.score) for rank, hit in enumerate(hits, start=1)}


def _hit(kb_id: str, hit: IndexHit, dense: tuple[int, float] | None, keyword: tuple[int, float] | None) -> SearchHit:
    payload: dict[str, Any] = hit.payload
    return SearchHit(
        chunk_id=hit.id,
        text=payload["text"],
        score=hit.score,
        knowledge_base_id=kb_id,
        document_id=payload["document_id"],
        source_id=payload["source_id"],
        title=payload.get("title", ""),
        version=payload["version"],
        ordinal=payload["ordinal"],
        heading_path=payload.get("heading_path") or [],
        page=payload.get("page"),
        char_start=payload.get("char_start", 0),
        char_end=payload.get("char_end", 0),
        labels=payload.get("labels") or [],
        doc_type=payload.get("doc_type", "knowledge"),
        dense_rank=dense[0] if dense else None,
        dense_score=dense[1] if dense else None,
        keyword_rank=keyword[0] if keyword else None,
        keyword_score=keyword[1] if keyword else None,
    )
