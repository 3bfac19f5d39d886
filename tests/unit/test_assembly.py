"""The cuts from candidates to an answer (retriever assembly): order, collapse, top_k, dedupe, threshold, quota,
max_blocks."""

from __future__ import annotations

from ragkb_core.contracts import DocType, SearchHit
from ragkb_retriever.assembly import Candidate, assemble


def hit(
    chunk: str, score: float, *, text: str | None = None, doc_type: DocType = "knowledge", kb: str = "a"
) -> SearchHit:
    return SearchHit(
        chunk_id=chunk,
        text=text or f"text of {chunk}",
        score=score,
        knowledge_base_id=kb,
        document_id=f"doc-{chunk}",
        source_id=chunk,
        title="",
        version=1,
        ordinal=0,
        doc_type=doc_type,
    )


def candidate(found: SearchHit, part: str = "a", threshold: float | None = None) -> Candidate:
    return Candidate(hit=found, part=part, threshold=threshold)


def ids(hits: list[SearchHit]) -> list[str]:
    return [found.chunk_id for found in hits]


def test_kbs_merge_by_score_and_max_blocks_cuts_the_rest() -> None:
    candidates = [candidate(hit("a1", 0.9)), candidate(hit("a2", 0.5)), candidate(hit("b1", 0.7, kb="b"), "b")]
    assembled = assemble(candidates, top_k_per_part={"a": 5, "b": 5}, doc_type_quotas=None, max_blocks=2)
    assert ids(assembled.results) == ["a1", "b1"]
    assert [(drop.stage, drop.hit.chunk_id) for drop in assembled.dropped] == [("max_blocks", "a2")]


def test_each_part_keeps_its_own_top_k() -> None:
    candidates = [candidate(hit(f"a{i}", 1 - i / 10)) for i in range(5)] + [candidate(hit("b1", 0.1, kb="b"), "b")]
    assembled = assemble(candidates, top_k_per_part={"a": 2, "b": 2}, doc_type_quotas=None, max_blocks=10)
    assert ids(assembled.results) == ["a0", "a1", "b1"]
    assert {drop.hit.chunk_id for drop in assembled.dropped if drop.stage == "top_k"} == {"a2", "a3", "a4"}


def test_the_same_text_twice_is_kept_once_the_better_ranked() -> None:
    candidates = [candidate(hit("x", 0.4, text="same  passage")), candidate(hit("y", 0.8, text="same passage"))]
    assembled = assemble(candidates, top_k_per_part={"a": 5}, doc_type_quotas=None, max_blocks=5)
    assert ids(assembled.results) == ["y"]
    assert assembled.dropped[0].stage == "dedupe" and "y" in assembled.dropped[0].reason


def test_threshold_applies_only_to_candidates_that_carry_one_and_were_reranked() -> None:
    low_reranked = hit("low", 0.2)
    low_reranked.rerank_score = 0.2
    high_reranked = hit("high", 0.9)
    high_reranked.rerank_score = 0.9
    not_reranked = hit("plain", 0.01)  # a fused score: the reranker's threshold means nothing for it
    candidates = [
        candidate(low_reranked, threshold=0.5),
        candidate(high_reranked, threshold=0.5),
        candidate(not_reranked),
    ]
    assembled = assemble(candidates, top_k_per_part={"a": 5}, doc_type_quotas=None, max_blocks=5)
    assert ids(assembled.results) == ["high", "plain"]
    assert [(drop.stage, drop.hit.chunk_id) for drop in assembled.dropped] == [("threshold", "low")]


def test_quotas_cap_each_doc_type_and_leave_unlisted_types_alone() -> None:
    references = [candidate(hit(f"r{i}", 0.9 - i / 100, doc_type="reference"), "a/reference") for i in range(4)]
    knowledge = [candidate(hit(f"k{i}", 0.5 - i / 100), "a/knowledge") for i in range(3)]
    parts = {"a/reference": 10, "a/knowledge": 10}
    assembled = assemble(references + knowledge, top_k_per_part=parts, doc_type_quotas={"reference": 1}, max_blocks=10)
    assert ids(assembled.results) == ["r0", "k0", "k1", "k2"]
    assert {drop.hit.chunk_id for drop in assembled.dropped if drop.stage == "quota"} == {"r1", "r2", "r3"}


def test_collapsed_by_document_each_document_keeps_its_best_candidate_and_top_k_counts_documents() -> None:
    passages = [hit(f"p{i}", 1 - i / 10) for i in range(4)]
    for passage in passages[:3]:
        passage.document_id = "manual"  # three passages of one document, the best ranked first
    same_document_elsewhere = hit("q", 0.95, kb="b")
    same_document_elsewhere.document_id = "manual"  # the same id in another KB is another document
    candidates = [candidate(found) for found in passages] + [candidate(same_document_elsewhere, "b")]
    assembled = assemble(
        candidates, top_k_per_part={"a": 2, "b": 2}, doc_type_quotas=None, max_blocks=10, collapse="document"
    )
    assert ids(assembled.results) == ["p0", "q", "p3"]
    assert {(drop.stage, drop.hit.chunk_id) for drop in assembled.dropped} == {("collapse", "p1"), ("collapse", "p2")}
    assert "p0" in assembled.dropped[0].reason


def test_the_similarity_floor_cuts_passages_under_their_kbs_min_relevance_with_or_without_a_reranker() -> None:
    """Issue 21: without a reranker nothing could be cut, so a question about something absent got 12 passages."""
    relevant, unrelated, keyword_only = hit("relevant", 0.9), hit("unrelated", 0.8), hit("keyword-only", 0.7)
    relevant.relevance, unrelated.relevance = 0.93, 0.12  # keyword_only: no dense leg ran, no relevance
    candidates = [Candidate(hit=h, part="a", threshold=None, floor=0.5) for h in (relevant, unrelated, keyword_only)]
    assembled = assemble(candidates, top_k_per_part={"a": 5}, doc_type_quotas=None, max_blocks=5)
    assert ids(assembled.results) == ["relevant", "keyword-only"]
    assert [(drop.stage, drop.hit.chunk_id) for drop in assembled.dropped] == [("relevance", "unrelated")]
    assert "under the min_relevance 0.5" in assembled.dropped[0].reason


def test_nothing_relevant_is_an_empty_answer() -> None:
    unrelated = [hit(f"u{i}", 1 - i / 10) for i in range(3)]
    for found in unrelated:
        found.relevance = 0.2
    candidates = [Candidate(hit=found, part="a", threshold=None, floor=0.5) for found in unrelated]
    assembled = assemble(candidates, top_k_per_part={"a": 12}, doc_type_quotas=None, max_blocks=12)
    assert assembled.results == [] and {drop.stage for drop in assembled.dropped} == {"relevance"}
