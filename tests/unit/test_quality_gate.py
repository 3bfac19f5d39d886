"""The re-index quality gate's decision: both generations scored with nDCG@10 on the KB's gate set, the switch
refused when the new one is worse by more than the tolerance, and no comparison where there is nothing to
compare (no gate set, a first index, an operator's override)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.contracts import KbGenerations, SearchHit, SearchQuery, SearchResult
from ragkb_core.kb_settings import KbAnalyzer, KbChunking
from ragkb_core.metrics import Question as JudgedQuestion
from ragkb_core.settings import DatabaseSettings
from ragkb_store.db.engine import build_engine, build_session_factory, migrate_to_head
from ragkb_store.db.models import Judgement, KnowledgeBase, Question, QuestionSet
from ragkb_store.quality_gate import (
    NDCG_TOLERANCE,
    SKIPPED_BY_REQUEST,
    SKIPPED_FIRST_INDEX,
    SKIPPED_NO_SET,
    GateSet,
    QualityCheck,
    ndcg_at_10,
    passes,
)
from ragkb_store.reindexing import BuildSettings, ReindexTarget
from ragkb_worker.quality_gate import QualityGate

KB = "kb-gate"
SERVING, NEW = 1, 2
QUESTIONS = {"q1": "doc-a", "q2": "doc-b", "q3": "doc-c"}


class FakeRetriever:
    """Answers each query with a fixed ranking per generation; records what it was asked."""

    def __init__(self, rankings: dict[int, dict[str, list[str]]], serving_points: int = 10) -> None:
        self.rankings = rankings
        self.serving_points = serving_points
        self.queries: list[SearchQuery] = []

    def generations(self, kb_id: str) -> KbGenerations:
        return KbGenerations(live=SERVING, all=[SERVING, NEW])

    def count_points(self, kb_id: str, document_id: str | None = None, *, generation: int | None = None) -> int:
        return self.serving_points if generation == SERVING else 0

    def search(self, query: SearchQuery) -> SearchResult:
        self.queries.append(query)
        kb = query.knowledge_bases[0]
        assert kb.generation is not None
        ranked = self.rankings[kb.generation].get(query.query, [])
        return SearchResult(results=[_hit(source_id) for source_id in ranked], took_ms=1.0, mode="hybrid")


def _hit(source_id: str) -> SearchHit:
    return SearchHit(
        chunk_id=source_id,
        text=source_id,
        score=1.0,
        knowledge_base_id=KB,
        document_id=source_id,
        source_id=source_id,
        title=source_id,
        version=1,
        ordinal=0,
    )


@pytest.fixture
def sessions(tmp_path: Path) -> sessionmaker[Session]:
    engine = build_engine(DatabaseSettings(url=f"sqlite:///{tmp_path / 'gate.db'}"))
    migrate_to_head(engine)
    factory = build_session_factory(engine)
    with factory.begin() as session:
        session.add(KnowledgeBase(id=KB, name="gate", embedding_model="m", analyzer_version="v"))
    return factory


def _save_gate_set(sessions: sessionmaker[Session], *, is_gate: bool = True) -> None:
    with sessions.begin() as session:
        session.add(QuestionSet(id="set-1", kb_id=KB, name="gate", is_quality_gate=is_gate))
        session.flush()
        for position, (query_id, source_id) in enumerate(QUESTIONS.items()):
            session.add(Question(set_id="set-1", query_id=query_id, position=position, text=f"text {query_id}"))
            session.add(Judgement(set_id="set-1", query_id=query_id, source_id=source_id, grade=1))


def _target(
    *, skip: bool = False, analyzer: KbAnalyzer | None = None, embedding_model: str | None = None
) -> ReindexTarget:
    settings = BuildSettings(chunking=KbChunking(), analyzer=analyzer or KbAnalyzer(), embedding_model=embedding_model)
    return ReindexTarget(generation=NEW, settings=settings, skip_quality_gate=skip)


def _perfect() -> dict[str, list[str]]:
    return {f"text {query_id}": [source_id, "other"] for query_id, source_id in QUESTIONS.items()}


def test_the_decision_allows_noise_within_the_tolerance_and_nothing_more() -> None:
    assert passes(0.8, 0.8) and passes(0.8, 0.9)
    assert passes(0.8, 0.8 - NDCG_TOLERANCE)
    assert not passes(0.8, 0.8 - NDCG_TOLERANCE - 0.0001)
    assert 0 < NDCG_TOLERANCE < 0.01


def test_ndcg_scores_every_judged_query_and_a_missing_answer_as_zero() -> None:
    gate = GateSet([JudgedQuestion("q1", "a"), JudgedQuestion("q2", "b")], {"q1": {"d1": 1}, "q2": {"d2": 1}}, "s")
    assert ndcg_at_10(gate, {"q1": ["d1"], "q2": ["d2", "x"]}) == 1.0
    assert ndcg_at_10(gate, {"q1": ["d1"]}) == 0.5
    assert ndcg_at_10(gate, {"q1": ["x", "d1"], "q2": ["d2"]}) == pytest.approx((1 / 1.58496 + 1) / 2, abs=1e-4)


def test_a_worse_new_generation_is_refused_with_both_figures(sessions: sessionmaker[Session]) -> None:
    _save_gate_set(sessions)
    worse = {text: list(reversed(ranked)) for text, ranked in _perfect().items()}
    retriever = FakeRetriever({SERVING: _perfect(), NEW: worse})
    check = QualityGate(sessions, retriever).check(KB, _target(analyzer=KbAnalyzer(japanese="char-bigram")))
    assert not check.passed and check.skipped is None
    assert (check.old_ndcg_at_10, check.new_ndcg_at_10) == (1.0, 0.6309)
    assert (check.old_generation, check.new_generation, check.queries) == (SERVING, NEW, 3)
    assert "1.0000" in check.refusal() and "0.6309" in check.refusal() and "skip_quality_gate" in check.refusal()
    # Each generation is searched with the analyzer it was built with, both with the same retrieval settings.
    analyzers = {query.knowledge_bases[0].generation: query.knowledge_bases[0].analyzer for query in retriever.queries}
    assert analyzers == {SERVING: KbAnalyzer(), NEW: KbAnalyzer(japanese="char-bigram")}
    assert {query.knowledge_bases[0].retrieval.top_k for query in retriever.queries} == {100}
    assert all(query.mode is None for query in retriever.queries)  # the KB's own default mode


def test_a_generation_of_another_model_is_searched_with_that_model(sessions: sessionmaker[Session]) -> None:
    _save_gate_set(sessions)
    retriever = FakeRetriever({SERVING: _perfect(), NEW: _perfect()})
    check = QualityGate(sessions, retriever).check(KB, _target(embedding_model="all-MiniLM-L6-v2"))
    assert check.passed and check.skipped is None
    models = {
        query.knowledge_bases[0].generation: query.knowledge_bases[0].embedding_model for query in retriever.queries
    }
    assert models == {SERVING: "m", NEW: "all-MiniLM-L6-v2"}  # the KB's model for the serving generation


def test_an_equal_or_better_generation_passes(sessions: sessionmaker[Session]) -> None:
    _save_gate_set(sessions)
    check = QualityGate(sessions, FakeRetriever({SERVING: {}, NEW: _perfect()})).check(KB, _target())
    assert check.passed and (check.old_ndcg_at_10, check.new_ndcg_at_10) == (0.0, 1.0)


@pytest.mark.parametrize(
    ("gate_set", "serving_points", "skip", "reason"),
    [
        (False, 10, False, SKIPPED_NO_SET),
        (True, 0, False, SKIPPED_FIRST_INDEX),
        (True, 10, True, SKIPPED_BY_REQUEST),
    ],
)
def test_no_comparison_without_a_set_on_a_first_index_or_when_skipped(
    sessions: sessionmaker[Session], gate_set: bool, serving_points: int, skip: bool, reason: str
) -> None:
    _save_gate_set(sessions, is_gate=gate_set)
    retriever = FakeRetriever({SERVING: _perfect(), NEW: {}}, serving_points=serving_points)
    check = QualityGate(sessions, retriever).check(KB, _target(skip=skip))
    assert check == QualityCheck.skipped_because(reason) and check.passed
    assert not retriever.queries
