"""Dense pseudo-relevance feedback in the retriever's search (KbRetrieval.feedback_passages, feedback_weight):
the question's vector moved towards the first pass's best passages, the KB searched again with it, and the
relevance still read from each passage's cosine with the question as asked.

The engine is a hand-written fake over a few 2-d passage vectors (exact cosine ranking, as the engine's dense leg
ranks); the search service, the Rocchio step and the cuts are the real ones."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest

from ragkb_analyzer import Analyzer, Bm25Encoder
from ragkb_core.contracts import KbSearch, ScopeFilter, SearchMode, SearchQuery, SearchResult, SparseTerms
from ragkb_core.fusion import relevance
from ragkb_core.kb_settings import KbAnalyzer, KbRetrieval, RelevanceCalibration, RetrievalOverrides
from ragkb_core.settings import AnalyzerSettings
from ragkb_retriever.feedback import moved_query
from ragkb_retriever.index.port import IndexHit, LegResults
from ragkb_retriever.reranking import RerankOutcome
from ragkb_retriever.searching import SearchService, cosine

# The question is [1, 0]. p1 is closest; p3 points the way p1 does but is far from the question itself.
PASSAGES = {"p1": [0.9, 0.436], "p2": [0.85, -0.527], "p3": [0.6, 0.8], "p4": [0.8, -0.6]}
CALIBRATION = RelevanceCalibration(midpoint=0.5, steepness=10)


class VectorWorld:
    """The dense leg of a KB of PASSAGES: every passage by cosine, best first; records each query vector."""

    def __init__(self, keyword_only: str | None = None) -> None:
        self.queries: list[list[float]] = []
        self.vectors_asked: list[str] = []
        # A passage only the keyword leg finds, answered first.
        self._keyword_only = keyword_only

    def search(  # noqa: PLR0917 -- VectorIndex.search's own signature
        self, kb_id: str, dense: list[float] | None, sparse: SparseTerms | None, scope: ScopeFilter, limit: int,
        candidate_limit: int, rrf_k: int, weights: tuple[float, float] = (1.0, 1.0), **_: Any,
    ) -> LegResults:  # fmt: skip
        keyword = (
            []
            if self._keyword_only is None
            else [IndexHit(self._keyword_only, 7.0, payload(kb_id, self._keyword_only))]
        )
        if dense is None:  # the keyword leg alone, run while the question is embedded
            return LegResults(fused=keyword[:limit], dense=[], keyword=keyword)
        self.queries.append(dense)
        ranked = sorted(PASSAGES, key=lambda p: -cosine(dense, PASSAGES[p]))[:candidate_limit]
        hits = [IndexHit(p, cosine(dense, PASSAGES[p]), payload(kb_id, p)) for p in ranked]
        return LegResults(fused=(keyword + hits)[:limit], dense=hits, keyword=keyword)

    def dense_vectors(self, kb_id: str, point_ids: Sequence[str], **_: Any) -> dict[str, list[float]]:
        self.vectors_asked += point_ids
        return {point: PASSAGES[point] for point in point_ids if point in PASSAGES}


class NoReranker:
    def is_available(self, model: str | None) -> bool:
        return False

    def rerank(self, model: str | None, query: str, texts: Sequence[str], budget_ms: int) -> RerankOutcome:
        raise AssertionError("no reranking was asked for")


class Question:
    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


def payload(kb_id: str, passage_id: str) -> dict[str, Any]:
    return {"text": passage_id, "document_id": f"doc-{passage_id}", "source_id": passage_id, "version": 1,
            "ordinal": 0, "kb_id": kb_id}  # fmt: skip


def search(index: VectorWorld, retrieval: KbRetrieval, mode: SearchMode | None = None) -> SearchResult:
    encoder = Bm25Encoder(Analyzer(KbAnalyzer()), AnalyzerSettings())
    searcher = SearchService(index, lambda _: Question(), lambda _: encoder, NoReranker())  # type: ignore[arg-type]
    kbs = [KbSearch(kb_id="kb", retrieval=retrieval)]
    return searcher.search(SearchQuery(query="paid leave", knowledge_bases=kbs, max_blocks=2, mode=mode))


def test_moved_query_is_rocchio_at_unit_length() -> None:
    moved = moved_query([1.0, 0.0], [[0.0, 1.0], [0.0, 1.0]], 1.0)
    assert moved == pytest.approx([1 / math.sqrt(2), 1 / math.sqrt(2)])
    assert moved_query([1.0, 0.0], [], 0.7) == [1.0, 0.0]
    assert moved_query([1.0, 0.0], [[0.0, 1.0]], 0.0) == [1.0, 0.0]


def test_feedback_searches_again_with_the_vector_moved_towards_the_best_passages() -> None:
    without = VectorWorld()
    plain = search(without, KbRetrieval(top_k=2, feedback_passages=0, relevance_calibration=CALIBRATION))
    assert [hit.chunk_id for hit in plain.results] == ["p1", "p2"] and len(without.queries) == 1

    index = VectorWorld()
    retrieval = KbRetrieval(top_k=2, feedback_passages=1, feedback_weight=1.0, relevance_calibration=CALIBRATION)
    result = search(index, retrieval)
    # Moved towards p1, the question now finds p3 (p1's neighbour) before p2.
    assert [hit.chunk_id for hit in result.results] == ["p1", "p3"]
    assert len(index.queries) == 2 and index.queries[1] == pytest.approx(moved_query([1.0, 0.0], [PASSAGES["p1"]], 1))
    # The relevance is the question's own cosine with p3 (0.6) through the calibration, not the moved one's.
    p3 = result.results[1]
    assert p3.relevance == pytest.approx(relevance(0.6, CALIBRATION), abs=1e-6)
    assert p3.dense_score == pytest.approx(cosine(index.queries[1], PASSAGES["p3"]))


def test_a_request_may_switch_feedback_off_or_on_within_bounds() -> None:
    kb = KbRetrieval(feedback_passages=3, feedback_weight=0.5)
    assert not kb.with_overrides(RetrievalOverrides(feedback_passages=0)).feeds_back
    assert kb.with_overrides(RetrievalOverrides(feedback_weight=1.5)).feedback_weight == 1.5
    with pytest.raises(ValueError, match="less than or equal"):
        RetrievalOverrides(feedback_passages=21)


def test_a_passage_only_the_keyword_leg_found_keeps_the_first_passs_lowest_cosine() -> None:
    """As without feedback: its relevance is that of the dense leg's last passage (p3, cosine 0.6 with the
    question as asked), and its vector is never read."""
    index = VectorWorld(keyword_only="kw")
    retrieval = KbRetrieval(top_k=2, feedback_passages=1, feedback_weight=1.0, relevance_calibration=CALIBRATION)
    result = search(index, retrieval)
    keyword_only = next(hit for hit in result.results if hit.chunk_id == "kw")
    assert keyword_only.relevance == pytest.approx(relevance(0.6, CALIBRATION), abs=1e-6)
    assert "kw" not in index.vectors_asked[1:]  # the first read is the feedback's own top passage


def test_a_semantic_search_is_not_fed_back() -> None:
    """Feedback was measured on hybrid searches (both legs) only, so a dense-only search runs once."""
    index = VectorWorld()
    retrieval = KbRetrieval(top_k=2, feedback_passages=1, feedback_weight=1.0)
    result = search(index, retrieval, mode="semantic")
    assert [hit.chunk_id for hit in result.results] == ["p1", "p2"] and len(index.queries) == 1
