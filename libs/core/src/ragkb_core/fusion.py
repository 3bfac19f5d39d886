"""One KB's answer computed in-process from its legs' candidates, as the retriever's search makes it: dense and
keyword, and the second model's where the KB has one (KbChunking.second_model), at its fixed `second_weight`.

A tune (ragkb_core.tuning) scores many retrieval settings on the same questions. Instead of one search per
setting and question, it fetches each question's dense and keyword candidates once, as deep as the deepest
setting reads (the retriever's legs endpoint), and computes every setting's answer here:

1. each leg cut to `top_k × candidate_multiplier` (the engine's prefetch limit), a leg of weight 0 not run;
2. the legs fused as the engine fuses them (ragkb_retriever.index.port: Qdrant's RRF with rank-scaling weights,
   k in the paper's convention; DBSF, each leg's scores mapped from mean ± 3 sample σ onto [0, 1], times its
   weight), summed in leg order, or the one leg that ran, cut to `top_k`;
3. the assembly's cuts that apply without a reranker and without quotas (ragkb_retriever.assembly): the same
   text twice kept once, a passage under the KB's `min_relevance` floor dropped (its relevance from its dense
   cosine, or the dense leg's lowest when only the keyword leg found it, and the question's keyword coverage of
   it, which the legs endpoint computes for every candidate), then `max_blocks`.

Equal fused scores are ordered by chunk id here; the engine orders them its own way, so two answers agree up to
the order of passages with equal scores (tests/e2e/test_tune.py holds the search to it)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from ragkb_core.contracts import KbSearch, ScopeFilter
from ragkb_core.kb_settings import FusionMethod, KbRetrieval, RelevanceCalibration

# The most candidates per leg a legs request may ask for (top_k × candidate_multiplier of the deepest setting).
MAX_LEG_DEPTH = 2000
# Questions per legs request: a batch is one round trip, small enough to report progress between batches.
MAX_LEGS_QUERIES = 64


class LegCandidate(BaseModel):
    """One passage a leg found, with its score in that leg (dense: cosine; keyword: BM25)."""

    chunk_id: str
    source_id: str
    score: float
    # A digest of the passage's text with whitespace collapsed: the assembly keeps one passage per text.
    text_key: str
    # The question's keyword coverage of the passage (keyword_coverage), for its relevance; None: unknown.
    coverage: float | None = None


class QueryLegs(BaseModel):
    """One question's candidates per leg, best first; `keyword` is empty when the query has no keyword terms,
    `second` unless the KB has a second model (KbChunking.second_model)."""

    dense: list[LegCandidate]
    keyword: list[LegCandidate]
    second: list[LegCandidate] = Field(default_factory=list)


class LegsQuery(BaseModel):
    """worker → retriever: each question's dense and keyword candidates in one KB, `depth` deep per leg, with
    the KB's analyzer and embedding model, inside `scope` (as its searches see it)."""

    kb: KbSearch
    queries: list[Annotated[str, StringConstraints(min_length=1)]] = Field(min_length=1, max_length=MAX_LEGS_QUERIES)
    depth: int = Field(ge=1, le=MAX_LEG_DEPTH)
    scope: ScopeFilter = Field(default_factory=ScopeFilter)


class LegsResult(BaseModel):
    """Per question (in order) its legs, and the cosine → relevance mapping the KB's searches use (None: none)."""

    legs: list[QueryLegs]
    calibration: RelevanceCalibration | None


@dataclass(frozen=True)
class FusionSettings:
    """The retrieval settings a tune searches; the rest of the KB's (top_k, max_blocks, floor) stay as they are."""

    fusion: FusionMethod
    rrf_k: int
    dense_weight: float
    keyword_weight: float
    candidate_multiplier: int
    # The second model's leg (KbRetrieval.second_weight) of a KB that has one (KbChunking.second_model); None: the
    # KB has none.
    second_weight: float | None = None

    @classmethod
    def of(cls, retrieval: KbRetrieval, *, second_leg: bool = False) -> FusionSettings:
        """The KB's settings; `second_leg`: it has a second model (else its second_weight means nothing)."""
        return cls(
            retrieval.fusion,
            retrieval.rrf_k,
            retrieval.dense_weight,
            retrieval.keyword_weight,
            retrieval.candidate_multiplier,
            retrieval.second_weight if second_leg else None,
        )

    def label(self) -> str:
        fused = f"rrf k={self.rrf_k}" if self.fusion == "rrf" else "dbsf"
        weights = f"dense×{self.dense_weight:g} keyword×{self.keyword_weight:g}"
        if self.second_weight is not None:
            weights += f" second×{self.second_weight:g}"
        return f"{fused} {weights} candidates×{self.candidate_multiplier}"

    @property
    def second_leg_weight(self) -> float:
        return self.second_weight or 0.0


class AnswerShape(BaseModel):
    """What of a KB's settings shapes an answer besides the fusion: fixed during a tune."""

    top_k: int = Field(ge=1)
    max_blocks: int = Field(ge=1)
    min_relevance: float = Field(ge=0, le=1)
    hybrid: bool = True


def relevance(cosine: float, calibration: RelevanceCalibration, coverage: float | None = None) -> float:
    """A dense cosine and the question's keyword coverage of the passage (None: unknown, counted as neutral) as
    a 0–1 relevance: the calibration's logistic (RelevanceCalibration)."""
    evidence = 0.0 if coverage is None else calibration.coverage_weight * (coverage - calibration.coverage_neutral)
    exponent = -calibration.steepness * (cosine + evidence - calibration.midpoint)
    return 1.0 / (1.0 + math.exp(min(exponent, 700.0)))


def keyword_coverage(query_terms: Iterable[int], passage_terms: Container[int], idfs: Mapping[int, float]) -> float:
    """The share of the question's keyword terms (ids) that the passage holds, each weighed by its IDF in the
    KB (a term the KB lacks has the highest): 0–1, 0 for a question without terms. Why: multilingual-e5 gives
    any question in the KB's language a cosine near its answers', so the cosine alone cannot tell "nothing
    relevant"; a question about something absent shares its rare words with no passage (bench/relevance.py)."""
    weights = {term: idfs.get(term, 0.0) for term in query_terms}
    total = sum(weights.values())
    if total <= 0:
        return 0.0
    return sum(weight for term, weight in weights.items() if term in passage_terms) / total


def distribution_normalised(scores: Sequence[float]) -> list[float]:
    """DBSF's normalisation of one leg: [mean − 3σ, mean + 3σ] (sample σ) onto [0, 1]; one score or no spread: 0.5."""
    if len(scores) < 2:
        return [0.5] * len(scores)
    mean = sum(scores) / len(scores)
    deviation = (sum((score - mean) ** 2 for score in scores) / (len(scores) - 1)) ** 0.5
    if deviation == 0:
        return [0.5] * len(scores)
    return [(score - (mean - 3 * deviation)) / (6 * deviation) for score in scores]


def fused_scores(
    dense: Sequence[LegCandidate],
    keyword: Sequence[LegCandidate],
    settings: FusionSettings,
    second: Sequence[LegCandidate] = (),
) -> dict[str, float]:
    """Each candidate's fused score (the legs already cut to the candidate depth), summed in the engine's leg
    order: dense, keyword, second."""
    totals: dict[str, float] = {}
    legs = ((dense, settings.dense_weight), (keyword, settings.keyword_weight), (second, settings.second_leg_weight))
    for leg, weight in legs:
        if not leg:
            continue
        parts = leg_parts([hit.score for hit in leg], settings.fusion, weight, settings.rrf_k)
        for hit, part in zip(leg, parts, strict=True):
            totals[hit.chunk_id] = totals.get(hit.chunk_id, 0.0) + part
    return totals


def leg_parts(scores: Sequence[float], fusion: FusionMethod, weight: float, rrf_k: int) -> list[float]:
    """What each hit of one leg (`scores` best first) adds to its fused score: RRF with Qdrant's rank-scaling
    weights in the paper's k (rank from 1), 1 / (k + rank / w); or DBSF, w × the distribution-normalised score.
    The retriever's fusion (ragkb_retriever.index.port) and a tune's computed answers both use it."""
    if fusion == "rrf":
        return [1.0 / (rrf_k + rank / weight) for rank in range(1, len(scores) + 1)]
    return [weight * value for value in distribution_normalised(scores)]


def answer(
    legs: QueryLegs,
    settings: FusionSettings,
    shape: AnswerShape,
    calibration: RelevanceCalibration | None,
) -> list[LegCandidate]:
    """The passages a search with these settings answers, best first (module docstring)."""
    depth = shape.top_k * settings.candidate_multiplier
    dense = legs.dense[:depth] if settings.dense_weight > 0 else []
    keyword = legs.keyword[:depth] if settings.keyword_weight > 0 and shape.hybrid else []
    second = legs.second[:depth] if settings.second_leg_weight > 0 and shape.hybrid else []
    if sum(1 for leg in (dense, keyword, second) if leg) > 1:
        scores = fused_scores(dense, keyword, settings, second)
        by_id = {hit.chunk_id: hit for hit in (*second, *keyword, *dense)}
        # The best top_k only (a tune computes this for every setting and question): the same as sorting all.
        order = heapq.nsmallest(shape.top_k, scores, key=lambda chunk_id: (-scores[chunk_id], chunk_id))
        fused = [by_id[chunk_id] for chunk_id in order]
    else:
        fused = list((dense or keyword or second)[: shape.top_k])
    return assembled(fused, dense, shape, calibration)


def assembled(
    fused: list[LegCandidate],
    dense: Sequence[LegCandidate],
    shape: AnswerShape,
    calibration: RelevanceCalibration | None,
) -> list[LegCandidate]:
    """The assembly's cuts of a fused list (`dense`: the dense leg as cut, for the passages' cosines)."""
    cosines = {hit.chunk_id: hit.score for hit in dense}
    lowest_cosine = dense[-1].score if dense else None
    seen_texts: set[str] = set()
    kept: list[LegCandidate] = []
    for hit in fused:
        if hit.text_key in seen_texts:
            continue
        seen_texts.add(hit.text_key)
        if _under_floor(cosines.get(hit.chunk_id, lowest_cosine), hit.coverage, calibration, shape.min_relevance):
            continue
        kept.append(hit)
    return kept[: shape.max_blocks]


def _under_floor(
    cosine: float | None, coverage: float | None, calibration: RelevanceCalibration | None, floor: float
) -> bool:
    """A passage without a relevance passes; the relevance is rounded as the search rounds it."""
    if calibration is None or cosine is None:
        return False
    return round(relevance(cosine, calibration, coverage), 6) < floor


def same_up_to_ties(served: Sequence[tuple[str, float]], computed: Sequence[str]) -> bool:
    """Whether `computed` (chunk ids) is the served answer (chunk id, score) but for the order of passages with
    equal scores; where the answer's last group of equals was cut short, only how many were kept must agree."""
    if len(served) != len(computed):
        return False
    start = 0
    while start < len(served):
        end = start + 1
        while end < len(served) and math.isclose(served[end][1], served[start][1], rel_tol=1e-5, abs_tol=1e-9):
            end += 1
        group = {chunk_id for chunk_id, _ in served[start:end]}
        if end < len(served) and group != set(computed[start:end]):
            return False
        start = end
    return True
