"""The retriever's search between the engine and the cuts: the reranker's candidate pool (top_k × the KB's
candidate_multiplier, 7 by default) and the merged candidates of several KBs reranked together by one model.

The engine and the reranker are hand-written fakes that answer what each test gives them and record what they
were asked; the analyzer, the search service, the blend and the cuts are the real ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragkb_analyzer import Analyzer, Bm25Encoder
from ragkb_core.contracts import KbSearch, ScopeFilter, SearchQuery, SearchResult, SparseTerms
from ragkb_core.kb_settings import KbAnalyzer, KbRetrieval
from ragkb_core.settings import AnalyzerSettings
from ragkb_retriever.index.port import IndexHit, LegResults
from ragkb_retriever.query_vectors import QueryVectorCache
from ragkb_retriever.reranking import RerankOutcome
from ragkb_retriever.searching import SearchService


class RecordingIndex:
    """Each KB answers its passages best first, as many as the search asks for, and records the depths."""

    def __init__(self, passages: dict[str, list[str]]) -> None:
        self._passages = passages  # kb → passage ids, in fused order
        self.asked: dict[str, tuple[int, int]] = {}  # kb → (fused limit, candidates per leg)

    def search(  # noqa: PLR0917 -- VectorIndex.search's own signature
        self, kb_id: str, dense: list[float] | None, sparse: SparseTerms | None, scope: ScopeFilter, limit: int,
        candidate_limit: int, rrf_k: int, weights: tuple[float, float] = (1.0, 1.0), **_: Any,
    ) -> LegResults:  # fmt: skip
        self.asked[kb_id] = (limit, candidate_limit)
        ranked = self._passages[kb_id][:candidate_limit]
        fused = [IndexHit(pid, 1.0 - rank / 100, payload(kb_id, pid)) for rank, pid in enumerate(ranked)]
        dense_leg = [IndexHit(hit.id, 0.9 - rank / 1000, {}) for rank, hit in enumerate(fused)]
        return LegResults(fused=fused[:limit], dense=dense_leg, keyword=[])

    def dense_vectors(self, kb_id: str, point_ids: Sequence[str], **_: Any) -> dict[str, list[float]]:
        # No vectors: dense feedback (on by default) leaves the question as it was, and searches the same again.
        return {}


class ScriptedReranker:
    """Scores each passage by the score the test gave its text; records each call."""

    def __init__(self, scores: dict[str, float]) -> None:
        self._scores = scores
        self.calls: list[tuple[str | None, list[str]]] = []

    def is_available(self, model: str | None) -> bool:
        return True

    def rerank(self, model: str | None, query: str, texts: Sequence[str], budget_ms: int) -> RerankOutcome:
        self.calls.append((model, list(texts)))
        return RerankOutcome([self._scores.get(text, 0.0) for text in texts], model, None, 1.0)


def payload(kb_id: str, passage_id: str) -> dict[str, Any]:
    return {"text": passage_id, "document_id": f"doc-{passage_id}", "source_id": passage_id, "version": 1,
            "ordinal": 0, "kb_id": kb_id}  # fmt: skip


def service(index: RecordingIndex, reranker: ScriptedReranker) -> SearchService:
    encoder = Bm25Encoder(Analyzer(KbAnalyzer()), AnalyzerSettings())
    return SearchService(index, lambda _: FixedVector(), lambda _: encoder, reranker)  # type: ignore[arg-type]


class FixedVector:
    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


def search(searcher: SearchService, *kbs: tuple[str, KbRetrieval]) -> SearchResult:
    query = SearchQuery(
        query="paid leave", knowledge_bases=[KbSearch(kb_id=kb, retrieval=retrieval) for kb, retrieval in kbs],
        max_blocks=20,
    )  # fmt: skip
    return searcher.search(query)


def test_reranking_reads_top_k_times_the_candidate_multiplier_and_keeps_top_k() -> None:
    passages = [f"a{rank}" for rank in range(40)]
    index = RecordingIndex({"a": passages})
    reranker = ScriptedReranker({"a20": 0.99, "a2": 0.9, "a35": 0.95})
    result = search(service(index, reranker), ("a", KbRetrieval(top_k=3, rerank=True, min_relevance=0)))
    assert index.asked["a"] == (21, 21)  # 3 × 7 fused candidates, 21 a leg
    assert reranker.calls == [(None, passages[:21])]  # the pool, not the answer, is reranked
    # a35 lay beyond the pool; a20, 20th fused, is the reranker's best; top_k still holds.
    assert [hit.chunk_id for hit in result.results] == ["a20", "a2", "a0"]


def test_without_a_reranker_the_answer_is_top_k_deep_while_each_leg_still_reads_the_pool() -> None:
    index = RecordingIndex({"a": [f"a{rank}" for rank in range(40)]})
    reranker = ScriptedReranker({})
    result = search(service(index, reranker), ("a", KbRetrieval(top_k=3, rerank=False, candidate_multiplier=5)))
    assert index.asked["a"] == (3, 15) and reranker.calls == []
    assert [hit.chunk_id for hit in result.results] == ["a0", "a1", "a2"]


def test_merged_kbs_are_reranked_together_by_the_first_reranking_kbs_model() -> None:
    """Scores of different models are not comparable: one call, one model, over every KB's pool."""
    index = RecordingIndex({"a": [f"a{rank}" for rank in range(30)], "b": [f"b{rank}" for rank in range(30)]})
    reranker = ScriptedReranker({"b9": 0.97, "a5": 0.9, "a0": 0.1, "b0": 0.1})
    first = KbRetrieval(top_k=2, rerank=True, reranker_model="model-a", min_relevance=0)
    second = KbRetrieval(top_k=2, rerank=True, reranker_model="model-b", min_relevance=0)
    result = search(service(index, reranker), ("a", first), ("b", second))
    assert len(reranker.calls) == 1
    model, texts = reranker.calls[0]
    assert model == "model-a" and sorted(texts) == sorted([f"a{r}" for r in range(14)] + [f"b{r}" for r in range(14)])
    assert result.reranked and result.reranker_model == "model-a"
    # Each KB keeps its own top_k of the reranked pool; the merged answer is in the reranker's order.
    assert [hit.chunk_id for hit in result.results] == ["b9", "a5", "a0", "b0"]
    assert [hit.rerank_score for hit in result.results] == [0.97, 0.9, 0.1, 0.1]


class CountingEncoder:
    """Each model's query vector, counting the embeddings per model."""

    def __init__(self, model: str | None, embedded: list[str | None]) -> None:
        self._model = model
        self._embedded = embedded

    def embed_query(self, text: str) -> list[float]:
        self._embedded.append(self._model)
        return [1.0, 0.0] if self._model is None else [0.0, 1.0]


def test_a_question_asked_again_is_embedded_once_per_model_through_the_service() -> None:
    """The composition root hands the service an empty cache, which is falsy (it has a length): it must still be
    the cache the service uses (`or` once replaced it with one that kept nothing)."""
    embedded: list[str | None] = []
    encoder = Bm25Encoder(Analyzer(KbAnalyzer()), AnalyzerSettings())
    searcher = SearchService(
        RecordingIndex({"a": ["a0"]}),  # type: ignore[arg-type]
        lambda model: CountingEncoder(model, embedded),
        lambda _: encoder,
        ScriptedReranker({}),  # type: ignore[arg-type]
        QueryVectorCache(capacity=8),
    )
    for model in (None, None, "other-model", "other-model", None):
        kb = KbSearch(kb_id="a", embedding_model=model, retrieval=KbRetrieval(rerank=False))
        searcher.search(SearchQuery(query="paid leave", knowledge_bases=[kb]))
    assert embedded == [None, "other-model"]
