"""A hybrid question that must be embedded has its keyword leg run meanwhile (SearchService): the keyword leg
does not need the vector, and the embedding releases the interpreter while the model runs.

The index and the encoder are hand-written fakes that record the order of events; the search service is the
real one."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ragkb_analyzer import Analyzer, Bm25Encoder
from ragkb_core.contracts import KbSearch, ScopeFilter, SearchMode, SearchQuery, SparseTerms
from ragkb_core.kb_settings import KbAnalyzer, KbRetrieval
from ragkb_core.settings import AnalyzerSettings
from ragkb_retriever.index.port import IndexHit, LegResults
from ragkb_retriever.query_vectors import QueryVectorCache
from ragkb_retriever.reranking import RerankOutcome
from ragkb_retriever.searching import SearchService


def payload(passage_id: str) -> dict[str, Any]:
    return {"text": passage_id, "document_id": f"doc-{passage_id}", "source_id": passage_id, "version": 1,
            "ordinal": 0, "kb_id": "kb"}  # fmt: skip


KEYWORD = [IndexHit("k1", 5.0, payload("k1")), IndexHit("p1", 3.0, payload("p1"))]
DENSE = [IndexHit("p1", 0.9, payload("p1")), IndexHit("p2", 0.8, payload("p2"))]


class RecordingIndex:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.keyword_started = threading.Event()
        self.given_keyword_legs: list[list[IndexHit] | None] = []

    def search(  # noqa: PLR0917 -- VectorIndex.search's own signature
        self, kb_id: str, dense: list[float] | None, sparse: SparseTerms | None, scope: ScopeFilter, limit: int,
        candidate_limit: int, rrf_k: int, weights: tuple[float, float] = (1.0, 1.0), *,
        keyword_leg: Sequence[IndexHit] | None = None, **_: Any,
    ) -> LegResults:  # fmt: skip
        if dense is None:
            self.events.append("keyword leg")
            self.keyword_started.set()
            return LegResults(fused=KEYWORD[:limit], dense=[], keyword=list(KEYWORD))
        self.events.append("search")
        self.given_keyword_legs.append(None if keyword_leg is None else list(keyword_leg))
        keyword = list(keyword_leg) if keyword_leg is not None else list(KEYWORD) if sparse else []
        fused = [*keyword, *DENSE] if keyword else list(DENSE)
        return LegResults(fused=fused[:limit], dense=list(DENSE), keyword=keyword)


class WaitingEncoder:
    """Embeds only once the keyword leg has started (or after a second): proves the two overlap."""

    def __init__(self, index: RecordingIndex) -> None:
        self._index = index

    def embed_query(self, text: str) -> list[float]:
        overlapped = self._index.keyword_started.wait(timeout=1.0)
        self._index.events.append("embedded" if overlapped else "embedded alone")
        return [1.0, 0.0]


class NoReranker:
    def is_available(self, model: str | None) -> bool:
        return False

    def rerank(self, model: str | None, query: str, texts: Sequence[str], budget_ms: int) -> RerankOutcome:
        raise AssertionError("no reranking was asked for")


def service(index: RecordingIndex) -> SearchService:
    encoder = Bm25Encoder(Analyzer(KbAnalyzer()), AnalyzerSettings())
    return SearchService(
        index,  # type: ignore[arg-type]
        lambda _: WaitingEncoder(index),  # type: ignore[arg-type,return-value]
        lambda _: encoder,
        NoReranker(),  # type: ignore[arg-type]
        QueryVectorCache(10),
    )


def ask(searcher: SearchService, mode: SearchMode | None = None) -> list[str]:
    kbs = [KbSearch(kb_id="kb", retrieval=KbRetrieval(top_k=3))]
    result = searcher.search(SearchQuery(query="paid leave days", knowledge_bases=kbs, mode=mode))
    return [hit.chunk_id for hit in result.results]


def test_a_new_hybrid_question_runs_its_keyword_leg_while_it_is_embedded() -> None:
    index = RecordingIndex()
    answer = ask(service(index))
    assert index.events == ["keyword leg", "embedded", "search"]
    # The search was handed the keyword leg and fused it with its dense leg.
    assert index.given_keyword_legs == [KEYWORD]
    assert answer[0] == "k1"


def test_a_cached_question_and_a_semantic_search_are_not_split() -> None:
    index = RecordingIndex()
    searcher = service(index)
    ask(searcher)
    index.events.clear()
    index.given_keyword_legs.clear()
    ask(searcher)  # the vector is cached: nothing to overlap
    assert index.events == ["search"]
    assert index.given_keyword_legs == [None]

    semantic = RecordingIndex()
    ask(service(semantic), mode="semantic")
    assert semantic.events == ["embedded alone", "search"]
