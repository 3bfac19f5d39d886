"""The re-index quality gate (ragkb_store.quality_gate): score the serving generation and the new one on the
KB's quality-gate question set, through the retriever's internal search, before the switch."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from ragkb_core.contracts import KbGenerations, KbSearch, SearchQuery, SearchResult
from ragkb_core.kb_settings import KbAnalyzer, KbChunking, KbRetrieval, RetrievalOverrides
from ragkb_core.metrics import documents_in_rank_order
from ragkb_store.db.models import KnowledgeBase
from ragkb_store.quality_gate import (
    GATE_DEPTH,
    SKIPPED_BY_REQUEST,
    SKIPPED_FIRST_INDEX,
    SKIPPED_NO_SET,
    GateSet,
    QualityCheck,
    load_gate_set,
    ndcg_at_10,
    passes,
)
from ragkb_store.reindexing import ReindexTarget

# Gate searches in flight at once: as an evaluation does, faster than one by one without crowding out searches.
SEARCH_CONCURRENCY = 4


class GateRetriever(Protocol):
    """What the gate needs of the retriever (ragkb_core.retriever_client.RetrieverClient)."""

    def generations(self, kb_id: str) -> KbGenerations: ...

    def count_points(self, kb_id: str, document_id: str | None = None, *, generation: int | None = None) -> int: ...

    def search(self, query: SearchQuery) -> SearchResult: ...


class QualityGate:
    def __init__(self, sessions: sessionmaker[Session], retriever: GateRetriever) -> None:
        self._sessions = sessions
        self._retriever = retriever

    def check(self, kb_id: str, target: ReindexTarget) -> QualityCheck:
        """Both generations' nDCG@10 on the KB's gate set, with the KB's retrieval settings and default mode
        (each generation searched with the analyzer and the embedding model it was built with), and whether the
        new one may serve."""
        if target.skip_quality_gate:
            return QualityCheck.skipped_because(SKIPPED_BY_REQUEST)
        with self._sessions() as session:
            gate = load_gate_set(session, kb_id)
            kb = session.get_one(KnowledgeBase, kb_id)
            retrieval = KbRetrieval.model_validate(kb.retrieval)
            analyzer = KbAnalyzer.model_validate(kb.analyzer)
            model = kb.embedding_model
            second_model = KbChunking.model_validate(kb.chunking).second_model
        if gate is None:
            return QualityCheck.skipped_because(SKIPPED_NO_SET)
        serving = self._retriever.generations(kb_id).live
        if self._retriever.count_points(kb_id, generation=serving) == 0:
            return QualityCheck.skipped_because(SKIPPED_FIRST_INDEX)
        retrieval = retrieval.with_overrides(RetrievalOverrides(top_k=GATE_DEPTH, max_blocks=GATE_DEPTH))
        old_kb = KbSearch(
            kb_id=kb_id,
            retrieval=retrieval,
            analyzer=analyzer,
            embedding_model=model,
            second_model=second_model,
            generation=serving,
        )
        new_kb = KbSearch(
            kb_id=kb_id,
            retrieval=retrieval,
            analyzer=target.settings.analyzer,
            embedding_model=target.settings.embedding_model or model,
            second_model=target.settings.chunking.second_model,
            generation=target.generation,
        )
        old, new = self._score(gate, old_kb), self._score(gate, new_kb)
        return QualityCheck(
            passed=passes(old, new),
            question_set_id=gate.set_id,
            queries=len(gate.questions),
            old_generation=serving,
            new_generation=target.generation,
            old_ndcg_at_10=old,
            new_ndcg_at_10=new,
        )

    def _score(self, gate: GateSet, kb: KbSearch) -> float:
        def ranked(text: str) -> list[str]:
            query = SearchQuery(
                query=text, knowledge_bases=[kb], max_blocks=GATE_DEPTH, doc_type_quotas=kb.retrieval.doc_type_quotas
            )
            return documents_in_rank_order(hit.source_id for hit in self._retriever.search(query).results)

        with ThreadPoolExecutor(SEARCH_CONCURRENCY) as pool:
            rankings = pool.map(ranked, [question.text for question in gate.questions])
            return ndcg_at_10(gate, dict(zip((q.query_id for q in gate.questions), rankings, strict=True)))
