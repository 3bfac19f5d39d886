"""Search: encode the query once per model, retrieve every KB in parallel inside the engine, rerank, assemble.

Stages and their timings (`SearchResult.timings_ms`): embed (the dense query vector, once per distinct
embedding model of the KBs searched), analyze (BM25 terms per distinct analyzer), retrieve (all KB legs, in
parallel), rerank, assemble (the cuts, see assembly.py).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ragkb_analyzer import Bm25Encoder, term_id
from ragkb_core.contracts import (
    AnalyzedTerm,
    AnalyzeQuery,
    AnalyzeResult,
    ContextQuery,
    ContextResult,
    DocType,
    KbSearch,
    LegRanking,
    LegRankingEntry,
    ScopeFilter,
    SearchHit,
    SearchMode,
    SearchQuery,
    SearchResult,
    SparseTerms,
    original_link,
)
from ragkb_core.errors import ExternalUnavailable, NotFound
from ragkb_core.fusion import LegCandidate, LegsQuery, LegsResult, QueryLegs, relevance
from ragkb_core.kb_settings import KbAnalyzer, RelevanceCalibration
from ragkb_models.cross_encoder import blend_scores, passage_for_reranking
from ragkb_retriever.assembly import Candidate, assemble
from ragkb_retriever.coverage import KeywordCoverage
from ragkb_retriever.external import ExternalSearch, needs_query_vector
from ragkb_retriever.external.passages import source_link
from ragkb_retriever.feedback import moved_query
from ragkb_retriever.index.filters import ordinal_window_filter
from ragkb_retriever.index.port import IndexHit, LegResults, SecondQuery, VectorIndex, no_results
from ragkb_retriever.query_vectors import QueryVectorCache
from ragkb_retriever.reranking import RerankerPool, RerankOutcome

DOC_TYPES: tuple[DocType, ...] = ("knowledge", "reference")
MAX_PARALLEL_SEARCHES = 4


class QueryEncoder(Protocol):
    def embed_query(self, text: str) -> list[float]: ...


# The query encoder of an embedding model by name (None: the default model), e.g. ragkb_models.EmbedderPool.get.
QueryEncoderFor = Callable[[str | None], QueryEncoder]
# An embedding model's cosine → relevance mapping by name (None: the default), e.g. EmbeddingSettings.relevance_of.
CalibrationFor = Callable[[str | None], RelevanceCalibration | None]
EncoderForAnalyzer = Callable[[KbAnalyzer], Bm25Encoder]


def qdrant_rrf_k(paper_k: int) -> int:
    """Qdrant ranks from 0 (score 1/(k + rank0)); the paper ranks from 1, so paper k 60 is Qdrant k 61."""
    return paper_k + 1


@dataclass(frozen=True)
class KbPart:
    """One engine search: a KB, or one doc_type share of it when the answer has per-doc_type quotas."""

    name: str
    kb: KbSearch
    mode: SearchMode
    scope: ScopeFilter
    reranks: bool

    @property
    def depth(self) -> int:
        """Fused candidates to read: top_k, or top_k × multiplier for the reranker to choose from."""
        retrieval = self.kb.retrieval
        return retrieval.top_k * retrieval.candidate_multiplier if self.reranks else retrieval.top_k


@dataclass(frozen=True)
class QueryVectors:
    # Per embedding model (KbSearch.embedding_model; None: the default).
    dense_by_model: dict[str | None, list[float]]
    sparse_by_analyzer: dict[str, SparseTerms]


class Stopwatch:
    """Wall time per stage; a stage that did not run is left out (not reported as 0)."""

    def __init__(self) -> None:
        self.timings_ms: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str, runs: bool = True) -> Iterator[None]:
        if not runs:
            yield
            return
        started = time.perf_counter()
        try:
            yield
        finally:
            self.timings_ms[name] = round((time.perf_counter() - started) * 1000, 2)


class SearchService:
    def __init__(
        self,
        index: VectorIndex,
        encoder_for: QueryEncoderFor,
        bm25_for: EncoderForAnalyzer,
        rerankers: RerankerPool,
        query_vectors: QueryVectorCache | None = None,
        *,
        calibration_for: CalibrationFor = lambda _: None,
        external: ExternalSearch | None = None,
    ) -> None:
        self._index = index
        self._external = external
        self._calibration_for = calibration_for
        self._encoder_for = encoder_for
        self._bm25_for = bm25_for
        self._rerankers = rerankers
        # `is None`, not `or`: an empty cache has a length of 0 and is falsy, so `or` replaced the composition
        # root's cache with one that keeps nothing, and no question was ever served from it.
        self._query_vectors = query_vectors if query_vectors is not None else QueryVectorCache(0)
        self._coverage = KeywordCoverage(index)
        self._pool = ThreadPoolExecutor(max_workers=MAX_PARALLEL_SEARCHES, thread_name_prefix="kb-search")

    def search(self, query: SearchQuery) -> SearchResult:
        started = time.perf_counter()
        watch = Stopwatch()
        parts = self._plan(query)
        sparse = self._analyze(query.query, parts, watch)
        early = self._keyword_legs_while_embedding(query.query, parts, sparse, explain=query.explain)
        vectors = QueryVectors(dense_by_model=self._embed(query.query, parts, watch), sparse_by_analyzer=sparse)
        with watch.stage("retrieve"):
            retrieved, unreachable = self._retrieve(query.query, parts, vectors, early, explain=query.explain)
        if unreachable and len(unreachable) == len({part.kb.kb_id for part in parts}):
            # Nothing was searched at all: a bad gateway, not an empty answer.
            raise ExternalUnavailable("; ".join(unreachable.values()), knowledge_bases=sorted(unreachable))
        candidates = [
            Candidate(
                hit=hit,
                part=part.name,
                threshold=part.kb.retrieval.score_threshold if part.reranks else None,
                floor=part.kb.retrieval.min_relevance,
            )
            for part, (hits, _) in zip(parts, retrieved, strict=True)
            for hit in hits
        ]
        with watch.stage("rerank", runs=any(part.reranks for part in parts)):
            outcome = self._rerank(query.query, parts, candidates)
        if outcome.scores is None:
            # Not reranked: the reranker's threshold does not apply to the fused scores.
            for candidate in candidates:
                candidate.threshold = None
        with watch.stage("assemble"):
            assembled = assemble(
                candidates,
                top_k_per_part={part.name: part.kb.retrieval.top_k for part in parts},
                doc_type_quotas=query.doc_type_quotas,
                max_blocks=query.max_blocks,
                collapse=query.collapse,
            )
        degraded_reasons = [*unreachable.values(), *([outcome.degraded_reason] if outcome.degraded_reason else [])]
        return SearchResult(
            results=assembled.results,
            took_ms=round((time.perf_counter() - started) * 1000, 2),
            mode=_overall_mode(parts),
            reranked=outcome.scores is not None and any(part.reranks for part in parts),
            degraded=bool(degraded_reasons),
            degraded_reason="; ".join(degraded_reasons) or None,
            reranker_model=outcome.model if outcome.scores is not None else None,
            timings_ms=watch.timings_ms,
            effective_settings={kb.kb_id: kb.retrieval for kb in query.knowledge_bases},
            dropped=assembled.dropped if query.explain else None,
            legs=[leg for part, (_, legs) in zip(parts, retrieved, strict=True) for leg in _leg_rankings(part, legs)]
            if query.explain
            else None,
        )

    def runs_without_models(self, query: SearchQuery) -> bool:
        """Whether the search is the index's work alone: no question to embed (a keyword search, or vectors
        cached from the question asked before), no reranker, no external KB to wait for."""
        parts = self._plan(query)
        if any(part.reranks or part.kb.external is not None for part in parts):
            return False
        return all(self._query_vectors.holds(model, query.query) for model in self._models(parts))

    # -- planning and encoding ---------------------------------------------------------------------

    def _plan(self, query: SearchQuery) -> list[KbPart]:
        parts: list[KbPart] = []
        for kb in query.knowledge_bases:
            mode = query.mode or ("hybrid" if kb.retrieval.hybrid else "semantic")
            reranks = self._reranks(kb)
            if query.doc_type_quotas is None:
                parts.append(KbPart(kb.kb_id, kb, mode, query.scope, reranks))
                continue
            # Each doc_type is retrieved on its own, so its share is filled from its own candidates.
            for doc_type in _doc_types_in_scope(query.scope):
                scope = query.scope.model_copy(update={"doc_types": [doc_type]})
                parts.append(KbPart(f"{kb.kb_id}/{doc_type}", kb, mode, scope, reranks))
        return parts

    def _reranks(self, kb: KbSearch) -> bool:
        wanted = kb.retrieval.rerank
        if wanted is None:
            return self._rerankers.is_available(kb.retrieval.reranker_model)
        return wanted

    def _embed(self, text: str, parts: Sequence[KbPart], watch: Stopwatch) -> dict[str | None, list[float]]:
        models = sorted(self._models(parts), key=str)
        with watch.stage("embed", runs=bool(models)):
            # One vector per distinct model: KBs of one model share it. Several models (a KB's second model, KBs
            # of different models) embed at once: the runtimes release the interpreter while they compute.
            others = {model: self._pool.submit(self._query_vector, model, text) for model in models[1:]}
            vectors = {model: self._query_vector(model, text) for model in models[:1]}
            return vectors | {model: future.result() for model, future in others.items()}

    @staticmethod
    def _models(parts: Sequence[KbPart]) -> set[str | None]:
        """The embedding models whose vector of the question the parts need (their second models' too)."""
        models = {part.kb.embedding_model for part in parts if part.mode != "keyword" and needs_query_vector(part.kb)}
        return models | {part.kb.second_model for part in parts if _runs_second(part)}

    def _analyze(self, text: str, parts: Sequence[KbPart], watch: Stopwatch) -> dict[str, SparseTerms]:
        analyzed = [part for part in parts if needs_query_vector(part.kb) and self._needs_terms(part)]
        with watch.stage("analyze", runs=bool(analyzed)):
            sparse: dict[str, SparseTerms] = {}
            for part in analyzed:
                encoder = self._bm25_for(part.kb.analyzer)
                if encoder.version not in sparse:
                    sparse[encoder.version] = encoder.encode_query(text)
        return sparse

    def _keyword_legs_while_embedding(
        self, text: str, parts: Sequence[KbPart], sparse: dict[str, SparseTerms], *, explain: bool
    ) -> dict[str, Future[LegResults]]:
        """The keyword legs of the hybrid parts of a question that must still be embedded, started in the pool
        now: the embedding releases the interpreter while the model runs, so on a free core the keyword leg
        costs the answer nothing. A question whose vectors are cached gains nothing (and is not split)."""
        if all(self._query_vectors.holds(model, text) for model in self._models(parts)):
            return {}
        early: dict[str, Future[LegResults]] = {}
        for part in parts:
            terms = self._keyword_terms(part, sparse)
            if part.kb.external is None and self._runs_dense(part) and terms is not None and terms.indices:
                # A limit of 1: the keyword leg is read `candidate_limit` deep whatever the limit, which only sets
                # how many of its passages come with payloads, and the fused answer is made later.
                early[part.name] = self._pool.submit(
                    self._engine_search, part.kb, part.scope, None, terms, 1, leg_payloads=explain
                )
        return early

    @staticmethod
    def _runs_dense(part: KbPart) -> bool:
        return part.mode != "keyword" and part.kb.retrieval.dense_weight > 0 and needs_query_vector(part.kb)

    def _keyword_terms(self, part: KbPart, sparse: dict[str, SparseTerms]) -> SparseTerms | None:
        """The question's terms for the part's keyword leg; None where the part runs no keyword leg."""
        retrieval = part.kb.retrieval
        if part.mode == "semantic" or retrieval.keyword_weight <= 0 or not needs_query_vector(part.kb):
            return None
        return sparse[self._bm25_for(part.kb.analyzer).version]

    def _needs_terms(self, part: KbPart) -> bool:
        """Whether the question's keyword terms are needed: for the keyword leg, or (a semantic search too) for
        the passages' relevance when the KB's calibration weighs the question's keyword coverage."""
        if part.mode != "semantic":
            return True
        calibration = self._calibration(part.kb)
        return calibration is not None and calibration.coverage_weight > 0

    def _calibration(self, kb: KbSearch) -> RelevanceCalibration | None:
        """How the KB's passages get their relevance: its own calibration, else its embedding model's."""
        return kb.retrieval.relevance_calibration or self._calibration_for(kb.embedding_model)

    def _query_vector(self, model: str | None, text: str) -> list[float]:
        return self._query_vectors.get_or_embed(model, text, lambda: self._encoder_for(model).embed_query(text))

    # -- retrieval ---------------------------------------------------------------------------------

    def _retrieve(
        self,
        text: str,
        parts: Sequence[KbPart],
        vectors: QueryVectors,
        early: dict[str, Future[LegResults]],
        *,
        explain: bool,
    ) -> tuple[list[tuple[list[SearchHit], LegResults]], dict[str, str]]:
        """Every part's hits and legs, and the external KBs that could not be reached (KB id → why): their parts
        contribute nothing, and the answer says so (degraded). `early`: keyword legs already started, by part."""
        unreachable: dict[str, str] = {}

        def one_part(part: KbPart) -> tuple[list[SearchHit], LegResults]:
            retrieval = part.kb.retrieval
            dense = vectors.dense_by_model[part.kb.embedding_model] if self._runs_dense(part) else None
            sparse = self._keyword_terms(part, vectors.sparse_by_analyzer)
            second = (
                SecondQuery(vectors.dense_by_model[part.kb.second_model], retrieval.second_weight)
                if _runs_second(part)
                else None
            )
            if part.kb.external is not None:
                try:
                    return self._external_part(text, part, dense, sparse)
                except ExternalUnavailable as exc:
                    unreachable[part.kb.kb_id] = f"knowledge base {part.kb.name or part.kb.kb_id}: {exc.detail}"
                    return [], no_results()
            # The legs' own payloads serve only the explanation of their rankings.
            started = early.get(part.name)
            legs = self._engine_search(
                part.kb,
                part.scope,
                dense,
                sparse,
                part.depth,
                leg_payloads=explain,
                keyword_leg=None if started is None else started.result().keyword,
                second=second,
            )
            as_asked = None
            # Measured (bench/feedback.py) and so applied on hybrid searches only: both legs ran.
            if dense is not None and sparse is not None and sparse.indices and retrieval.feeds_back and legs.fused:
                legs, as_asked = self._second_pass(part, dense, sparse, legs, explain=explain, second=second)
            calibration = self._calibration(part.kb)
            terms = vectors.sparse_by_analyzer.get(self._bm25_for(part.kb.analyzer).version)
            coverage = self._coverages(part.kb, terms, legs.fused if legs.dense else [], calibration)
            return _annotated_hits(part.kb, legs, calibration, as_asked, coverage), legs

        if len(parts) == 1:
            return [one_part(parts[0])], unreachable
        return list(self._pool.map(one_part, parts)), unreachable

    def _coverages(
        self,
        kb: KbSearch,
        terms: SparseTerms | None,
        hits: Sequence[IndexHit],
        calibration: RelevanceCalibration | None,
    ) -> dict[str, float]:
        """The question's keyword coverage of each hit, where the KB's relevance weighs it (else none)."""
        if calibration is None or calibration.coverage_weight == 0 or terms is None or not hits:
            return {}
        return self._coverage.of(kb.kb_id, kb.generation, terms.indices, [hit.id for hit in hits])

    def _engine_search(
        self,
        kb: KbSearch,
        scope: ScopeFilter,
        dense: list[float] | None,
        sparse: SparseTerms | None,
        limit: int,
        *,
        leg_payloads: bool,
        keyword_leg: Sequence[IndexHit] | None = None,
        second: SecondQuery | None = None,
    ) -> LegResults:
        """One search of the KB's index with its retrieval settings: `limit` fused passages (`keyword_leg`: its
        keyword leg, already run; `second`: the second model's leg, where the KB runs one)."""
        retrieval = kb.retrieval
        return self._index.search(
            kb.kb_id,
            dense,
            sparse,
            scope,
            limit,
            retrieval.top_k * retrieval.candidate_multiplier,
            qdrant_rrf_k(retrieval.rrf_k),
            # A leg of weight 0 does not run at all (one_part); the weights matter only when both run.
            weights=(retrieval.dense_weight or 1.0, retrieval.keyword_weight or 1.0),
            fusion=retrieval.fusion,
            generation=kb.generation,
            leg_payloads=leg_payloads,
            keyword_leg=keyword_leg,
            second=second,
        )

    def _feedback_vector(self, kb: KbSearch, dense: list[float], first: LegResults) -> list[float]:
        """The question's vector moved towards the first pass's best fused passages (ragkb_retriever.feedback)."""
        best = [hit.id for hit in first.fused[: kb.retrieval.feedback_passages]]
        vectors = self._index.dense_vectors(kb.kb_id, best, generation=kb.generation)
        return moved_query(dense, [vectors[i] for i in best if i in vectors], kb.retrieval.feedback_weight)

    def _second_pass(
        self,
        part: KbPart,
        dense: list[float],
        sparse: SparseTerms | None,
        first: LegResults,
        *,
        explain: bool,
        second: SecondQuery | None = None,
    ) -> tuple[LegResults, AsAsked]:
        """Dense pseudo-relevance feedback: the KB searched again with the moved vector. Relevance keeps reading
        each passage's cosine with the question as asked (the calibration was fitted on those; the moved vector
        is closer to every passage near the first pass's), so the vectors of the answered passages the dense leg
        found are read too; one only the keyword leg found keeps the first pass's lowest, as without feedback."""
        kb = part.kb
        moved = self._feedback_vector(kb, dense, first)
        again = self._engine_search(kb, part.scope, moved, sparse, part.depth, leg_payloads=explain, second=second)
        in_dense_leg = {hit.id for hit in again.dense}
        found_by_dense = [hit.id for hit in again.fused if hit.id in in_dense_leg or not again.keyword]
        answered = self._index.dense_vectors(kb.kb_id, found_by_dense, generation=kb.generation)
        lowest = first.dense[-1].score if first.dense else None
        return again, AsAsked({point: cosine(dense, vector) for point, vector in answered.items()}, lowest)

    def _external_part(
        self, text: str, part: KbPart, dense: list[float] | None, sparse: SparseTerms | None
    ) -> tuple[list[SearchHit], LegResults]:
        """An external KB's part: searched where it lives, then annotated as a native part's hits are. A Dify
        record's 0–1 score is its relevance; a Qdrant passage's relevance is its cosine through the model's
        calibration, as a native KB's."""
        if self._external is None:
            raise ExternalUnavailable("this retriever searches no external knowledge bases")
        legs = self._external.search(
            part.kb, text, mode=part.mode, dense=dense, sparse=sparse, scope=part.scope, depth=part.depth
        )
        embeds = needs_query_vector(part.kb)
        calibration = None
        if embeds:
            calibration = self._calibration(part.kb)
        hits = _annotated_hits(part.kb, legs, calibration)
        for hit in hits:
            hit.original_url = source_link(hit.source_id)
            if not embeds:
                hit.relevance = hit.fused_score
        return hits, legs

    # -- reranking ---------------------------------------------------------------------------------

    def _rerank(self, query: str, parts: Sequence[KbPart], candidates: list[Candidate]) -> RerankOutcome:
        """If any KB reranks, the merged candidates of all KBs are reranked together by one model: the
        first reranking KB's (scores of different models are not comparable, so its rerank_weight applies to
        all), within the smallest budget."""
        hits = [candidate.hit for candidate in candidates]
        reranking = [part.kb.retrieval for part in parts if part.reranks]
        if not reranking or not hits:
            return RerankOutcome(scores=None, model=None, degraded_reason=None, took_ms=0.0)
        budget = min(retrieval.rerank_budget_ms for retrieval in reranking)
        outcome = self._rerankers.rerank(reranking[0].reranker_model, query, [_rerank_text(h) for h in hits], budget)
        if outcome.scores is None:
            return outcome
        for hit, score in zip(hits, outcome.scores, strict=True):
            hit.rerank_score = round(score, 6)
        # Fused scores are comparable only within the KB (and document type) part that produced them.
        by_part: dict[str, list[Candidate]] = defaultdict(list)
        for candidate in candidates:
            by_part[candidate.part].append(candidate)
        weight = reranking[0].rerank_weight
        for group in by_part.values():
            rerank = [candidate.hit.rerank_score or 0.0 for candidate in group]
            fused = [candidate.hit.fused_score or 0.0 for candidate in group]
            for candidate, blended in zip(group, blend_scores(rerank, fused, weight), strict=True):
                candidate.hit.score = round(blended, 6)
        return outcome

    # -- legs for a tune ------------------------------------------------------------------------------

    def legs(self, query: LegsQuery) -> LegsResult:
        """Each question's dense and keyword candidates, `depth` deep, as a hybrid search of the KB runs its legs
        (ragkb_core.fusion computes any setting's answer from them)."""
        kb = query.kb
        encoder = self._bm25_for(kb.analyzer)

        def one_question(text: str) -> QueryLegs:
            dense = self._query_vector(kb.embedding_model, text)
            sparse = encoder.encode_query(text)
            # The second model's leg whatever its weight (a tune may try others); its first pass as the KB runs it.
            second_vector = None if kb.second_model is None else self._query_vector(kb.second_model, text)
            if kb.retrieval.feeds_back and kb.retrieval.hybrid and sparse.indices:
                # The legs the KB's second pass runs (its first pass with its current fusion settings).
                first_second = None
                if second_vector is not None and kb.retrieval.second_weight > 0:
                    first_second = SecondQuery(second_vector, kb.retrieval.second_weight)
                first = self._engine_search(
                    kb, query.scope, dense, sparse, kb.retrieval.top_k, leg_payloads=False, second=first_second
                )
                dense = self._feedback_vector(kb, dense, first) if first.fused else dense
            found = self._index.search(
                kb.kb_id,
                dense,
                sparse,
                query.scope,
                1,
                query.depth,
                qdrant_rrf_k(kb.retrieval.rrf_k),
                generation=kb.generation,
                leg_payloads=True,
                # Its weight does not matter here: only the legs are read.
                second=None if second_vector is None else SecondQuery(second_vector, 1.0),
            )
            everyone = [*found.dense, *found.keyword, *found.second]
            coverage = self._coverages(kb, sparse, everyone if found.dense else [], calibration)
            return QueryLegs(
                dense=leg_candidates(found.dense, coverage),
                keyword=leg_candidates(found.keyword, coverage),
                second=leg_candidates(found.second, coverage),
            )

        calibration = self._calibration(kb)
        return LegsResult(legs=list(self._pool.map(one_question, query.queries)), calibration=calibration)

    # -- analysis ----------------------------------------------------------------------------------

    def analyze(self, query: AnalyzeQuery) -> AnalyzeResult:
        """The terms `query.analyzer` makes of the text, with their ids and passage weights."""
        encoder = self._bm25_for(query.analyzer)
        analysis = encoder.analyzer.analyze(query.text)
        tokens = analysis.terms
        weights = encoder.term_weights(analysis)
        counts = Counter(tokens)
        terms = [
            AnalyzedTerm(term=term, term_id=term_id(term), count=counts[term], document_weight=round(weights[term], 6))
            for term in counts
        ]
        return AnalyzeResult(analyzer=query.analyzer, analyzer_version=encoder.version, terms=terms, tokens=tokens)

    # -- neighbours --------------------------------------------------------------------------------

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
        passages = sorted((_hit(kb_id, hit) for hit in hits), key=lambda hit: hit.ordinal)
        return ContextResult(passages=passages)

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        if self._external is not None:
            self._external.close()


def _runs_second(part: KbPart) -> bool:
    """Whether the part runs its KB's second model's leg: in hybrid searches of a KB that has one (where it was
    measured, bench/feedback.py), at a weight above 0."""
    kb = part.kb
    return kb.second_model is not None and part.mode == "hybrid" and kb.retrieval.second_weight > 0


def _doc_types_in_scope(scope: ScopeFilter) -> list[DocType]:
    return [doc_type for doc_type in DOC_TYPES if scope.doc_types is None or doc_type in scope.doc_types]


def _overall_mode(parts: Sequence[KbPart]) -> SearchMode | Literal["mixed"]:
    modes = {part.mode for part in parts}
    return modes.pop() if len(modes) == 1 else "mixed"


def _rerank_text(hit: SearchHit) -> str:
    return passage_for_reranking(hit.title, hit.heading_path, hit.text)


@dataclass(frozen=True)
class AsAsked:
    """After feedback: each answered passage's cosine with the question as asked, and the first pass's lowest
    dense cosine (what a passage only the keyword leg found is given)."""

    cosines: dict[str, float]
    lowest: float | None


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norms if norms > 0 else 0.0


def _annotated_hits(
    kb: KbSearch,
    legs: LegResults,
    calibration: RelevanceCalibration | None,
    as_asked: AsAsked | None = None,
    coverage: Mapping[str, float] | None = None,
) -> list[SearchHit]:
    """Fused hits with their fused rank, the rank and score each had in the dense and keyword legs, and their
    relevance (from the cosine and the question's keyword `coverage` of the hit, where known)."""
    coverage = coverage or {}
    dense_ranks = _ranks(legs.dense)
    keyword_ranks = _ranks(legs.keyword)
    second_ranks = _ranks(legs.second)
    # A passage only the keyword leg found is at most as close to the question as the dense leg's last.
    lowest_cosine = legs.dense[-1].score if legs.dense else None
    if as_asked is not None:
        lowest_cosine = as_asked.lowest
    hits = []
    for rank, found in enumerate(legs.fused, start=1):
        hit = _hit(kb.kb_id, found, dense_ranks.get(found.id), keyword_ranks.get(found.id), kb.name)
        hit.fused_rank, hit.fused_score = rank, found.score
        if (second := second_ranks.get(found.id)) is not None:
            hit.second_rank, hit.second_score = second
        cosine = hit.dense_score if hit.dense_score is not None else lowest_cosine
        if as_asked is not None:
            cosine = as_asked.cosines.get(found.id, lowest_cosine)
        if calibration is not None and cosine is not None:
            hit.relevance = round(relevance(cosine, calibration, coverage.get(found.id)), 6)
        hits.append(hit)
    return hits


def leg_candidates(hits: Sequence[IndexHit], coverage: Mapping[str, float] | None = None) -> list[LegCandidate]:
    """A leg's hits as a tune reads them: id, document, score, a digest of the text and the question's keyword
    coverage of it (where the relevance weighs it)."""
    coverage = coverage or {}
    return [
        LegCandidate(
            chunk_id=hit.id,
            source_id=hit.payload["source_id"],
            score=hit.score,
            text_key=_text_key(hit.payload.get("text", "")),
            coverage=coverage.get(hit.id),
        )
        for hit in hits
    ]


def _text_key(text: str) -> str:
    """As the assembly compares texts (whitespace collapsed), in 16 hex characters."""
    return hashlib.blake2b(" ".join(text.split()).encode(), digest_size=8).hexdigest()


def _leg_rankings(part: KbPart, legs: LegResults) -> list[LegRanking]:
    """The legs' own rankings (explain): where each candidate stood before fusion."""
    rankings = []
    named: tuple[tuple[Literal["dense", "keyword", "second"], list[IndexHit]], ...] = (
        ("dense", legs.dense),
        ("keyword", legs.keyword),
        ("second", legs.second),
    )
    for leg_name, leg_hits in named:
        if leg_hits:
            entries = [
                LegRankingEntry(
                    chunk_id=hit.id, document_id=hit.payload["document_id"], rank=rank, score=round(hit.score, 6)
                )
                for rank, hit in enumerate(leg_hits, start=1)
            ]
            rankings.append(LegRanking(knowledge_base_id=part.kb.kb_id, part=part.name, leg=leg_name, entries=entries))
    return rankings


def _ranks(hits: Sequence[IndexHit]) -> dict[str, tuple[int, float]]:
    return {hit.id: (rank, hit.score) for rank, hit in enumerate(hits, start=1)}


def _hit(
    kb_id: str,
    hit: IndexHit,
    dense: tuple[int, float] | None = None,
    keyword: tuple[int, float] | None = None,
    kb_name: str = "",
) -> SearchHit:
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
        metadata=payload.get("metadata") or {},
        knowledge_base_name=kb_name,
        original_url=original_link(kb_id, payload["document_id"], payload.get("page")),
        dense_rank=dense[0] if dense else None,
        dense_score=dense[1] if dense else None,
        keyword_rank=keyword[0] if keyword else None,
        keyword_score=keyword[1] if keyword else None,
    )
