"""Per-KB tuning: which fusion settings retrieve a KB's own question set best, judged by k-fold cross-validation.

Every candidate setting's answer to every question is computed in-process from the question's legs
(ragkb_core.fusion) and scored by nDCG@10 over documents (the evaluations' reduction: passages to documents in
rank order, gain 2^grade − 1, discount log2(rank + 1), the ideal from every judged document). Then:

- the questions are dealt into `folds` folds by a seeded permutation;
- per fold, the candidate with the best mean nDCG@10 on the other folds wins (ties: the earlier candidate, and
  the KB's current settings come first, so a tie keeps them); it and the current settings are scored on the
  held-out fold;
- the held-out gain is the mean over all questions of (winner of the question's fold − current) on that
  question; its 95 % interval is a paired bootstrap over those per-question differences (the fold winners
  fixed: the interval is of the gain of this procedure's choices on these questions, not of every choice it
  could have made);
- the setting recommended is the best on all questions (its in-sample figure is optimistic; the held-out gain
  is the figure to judge it by).

The search does not cover the analyzer (its options change the indexed terms: a re-index, see POST
.../reindex), the reranker, top_k, max_blocks or the similarity floor; those stay as the KB has them."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Annotated

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, Field

from ragkb_core.contracts import ScopeFilter
from ragkb_core.fusion import (
    MAX_LEG_DEPTH,
    AnswerShape,
    FusionSettings,
    LegCandidate,
    QueryLegs,
    answer,
    assembled,
    distribution_normalised,
)
from ragkb_core.kb_settings import MAX_CANDIDATE_MULTIPLIER, FusionMethod, KbRetrieval, RelevanceCalibration

MAX_CANDIDATES = 1000
MAX_FOLDS = 20
# Questions each fold needs at least: a fold of one question makes a held-out mean of one figure.
MIN_QUESTIONS_PER_FOLD = 2
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
NOT_SEARCHED = (
    "analyzer options (they change the indexed terms: a re-index, POST .../reindex, judged by the KB's quality "
    "gate), the reranker, top_k, max_blocks and min_relevance stay as the KB has them"
)
CI_METHOD = (
    "paired bootstrap over the held-out questions: the per-question nDCG@10 difference (winner of the question's "
    f"fold − current settings) resampled {BOOTSTRAP_RESAMPLES} times with replacement, 2.5th and 97.5th "
    "percentiles of the mean"
)


def _both_fusions() -> list[FusionMethod]:
    return ["dbsf", "rrf"]


class TuneSpace(BaseModel):
    """The settings searched: every combination of these (the dense leg's weight is 1, the keyword leg's varies;
    rrf_k applies to RRF only), plus the KB's current settings."""

    fusion: list[FusionMethod] = Field(default_factory=_both_fusions, min_length=1, max_length=2)
    rrf_k: list[Annotated[int, Field(ge=1, le=1000)]] = Field(
        default_factory=lambda: [5, 10, 20, 40, 60], min_length=1, max_length=20
    )
    keyword_weight: list[Annotated[float, Field(gt=0, le=10)]] = Field(
        default_factory=lambda: [0.5, 0.75, 1.0, 1.5, 2.0], min_length=1, max_length=20
    )
    candidate_multiplier: list[Annotated[int, Field(ge=1, le=MAX_CANDIDATE_MULTIPLIER)]] = Field(
        default_factory=lambda: [2, 4, 7, 14, 25], min_length=1, max_length=20
    )
    # A KB with a second model (KbChunking.second_model): its leg's weights to try. None: the KB's own only.
    second_weight: list[Annotated[float, Field(ge=0, le=10)]] | None = Field(default=None, min_length=1, max_length=10)


class TuneRequest(BaseModel):
    question_set_id: str = Field(min_length=1, max_length=64)
    space: TuneSpace = Field(default_factory=TuneSpace)
    folds: int = Field(default=5, ge=2, le=MAX_FOLDS)
    # Seeds the folds and the bootstrap: the same request on the same KB gives the same result.
    seed: int = Field(default=21, ge=0, le=2**31 - 1)


class TunedSettings(BaseModel):
    """The fields a tune chooses (a patch of the KB's retrieval settings)."""

    fusion: FusionMethod
    rrf_k: int
    dense_weight: float
    keyword_weight: float
    candidate_multiplier: int
    # A KB with a second model only (None: it has none, and the patch leaves the field alone).
    second_weight: float | None = None
    label: str

    @classmethod
    def of(cls, settings: FusionSettings) -> TunedSettings:
        return cls(
            fusion=settings.fusion,
            rrf_k=settings.rrf_k,
            dense_weight=settings.dense_weight,
            keyword_weight=settings.keyword_weight,
            candidate_multiplier=settings.candidate_multiplier,
            second_weight=settings.second_weight,
            label=settings.label(),
        )

    def patch(self) -> dict[str, object]:
        patch = self.model_dump(exclude={"label"})
        if self.second_weight is None:
            del patch["second_weight"]
        return patch


class FoldResult(BaseModel):
    fold: int
    queries: int
    # Chosen on the other folds.
    winner: TunedSettings
    winner_ndcg_at_10: float
    current_ndcg_at_10: float
    gain: float


class HeldOutGain(BaseModel):
    """Over every question, each scored in the fold it was held out of."""

    winner_ndcg_at_10: float
    current_ndcg_at_10: float
    gain: float
    ci_low: float
    ci_high: float
    confidence: float = CONFIDENCE
    # Questions the fold winners answered better / worse / the same as the current settings.
    wins: int
    losses: int
    ties: int
    method: str = CI_METHOD


class SearchCheck(BaseModel):
    """The current settings' computed answers against the search's own, for the first questions: equal up to the
    order of passages with equal scores."""

    queries: int
    identical: int


class TuneResult(BaseModel):
    question_set_id: str
    queries: int
    folds: int
    seed: int
    candidates: int
    # Candidates per leg fetched once per question (top_k × the largest candidate_multiplier).
    leg_depth: int
    current: TunedSettings
    current_ndcg_at_10: float
    fold_results: list[FoldResult]
    held_out: HeldOutGain
    # The best on all questions: what applying the tune sets.
    recommended: TunedSettings
    recommended_ndcg_at_10: float
    # Whether the recommendation differs from the current settings (otherwise there is nothing to apply).
    changes: bool
    not_searched: str = NOT_SEARCHED
    search_check: SearchCheck | None = None
    # The KB's settings version the tune ran against; applying it refuses if the settings changed since.
    settings_version: int | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)


class TuneJobParams(BaseModel):
    """What a tune job was asked (api → worker, through the job's params) and, once done, its result."""

    request: TuneRequest
    # What the tune's legs may see: the requesting key's search scope in the KB.
    scope: ScopeFilter = Field(default_factory=ScopeFilter)
    settings_version: int | None = None
    result: TuneResult | None = None


# -- candidates ------------------------------------------------------------------------------------------


def candidates(current: FusionSettings, space: TuneSpace) -> list[FusionSettings]:
    """The current settings first, then every combination of the space (RRF once per k, DBSF once), without
    repeats. The second model's leg weights are searched only where the KB has one (`current.second_weight`)."""
    if space.second_weight is not None and current.second_weight is None:
        raise ValueError("second_weight applies to a KB with a second model (chunking.second_model); this one has none")
    seconds = [current.second_weight] if space.second_weight is None else space.second_weight
    found: dict[FusionSettings, None] = {current: None}
    combinations = product(space.fusion, space.keyword_weight, space.candidate_multiplier, seconds)
    for fusion, weight, multiplier, second in combinations:
        ks = space.rrf_k if fusion == "rrf" else [current.rrf_k]
        for k in ks:
            found.setdefault(FusionSettings(fusion, k, 1.0, weight, multiplier, second), None)
    if len(found) > MAX_CANDIDATES:
        raise ValueError(f"the search space has {len(found)} settings; at most {MAX_CANDIDATES}")
    return list(found)


def leg_depth(shape: AnswerShape, settings: Sequence[FusionSettings]) -> int:
    """Candidates per leg the deepest setting reads."""
    return shape.top_k * max(candidate.candidate_multiplier for candidate in settings)


def check_leg_depth(depth: int) -> None:
    if depth > MAX_LEG_DEPTH:
        raise ValueError(
            f"top_k × the largest candidate_multiplier is {depth} candidates per leg; at most {MAX_LEG_DEPTH}"
        )


# -- scoring ---------------------------------------------------------------------------------------------


def ndcg_at_10(ranked_documents: Sequence[str], judged: Mapping[str, int]) -> float:
    """nDCG@10 as ragkb_core.metrics defines it (trec_eval's: grades ≤ 0 gain nothing)."""
    dcg = sum((2 ** judged.get(doc, 0) - 1) / math.log2(rank + 2) for rank, doc in enumerate(ranked_documents[:10]))
    ideal = sorted((grade for grade in judged.values() if grade > 0), reverse=True)[:10]
    best = sum((2**grade - 1) / math.log2(rank + 2) for rank, grade in enumerate(ideal))
    return dcg / best if best else 0.0


@dataclass(frozen=True)
class ScoreTable:
    """nDCG@10 per candidate (rows, in candidate order) and question (columns, in question order)."""

    settings: list[FusionSettings]
    scores: list[list[float]]

    @property
    def questions(self) -> int:
        return len(self.scores[0]) if self.scores else 0


def score_candidates(
    settings: Sequence[FusionSettings],
    legs: Sequence[QueryLegs],
    judgements: Sequence[Mapping[str, int]],
    shape: AnswerShape,
    calibration: RelevanceCalibration | None,
) -> ScoreTable:
    """Every candidate's nDCG@10 on every question, from the questions' legs. Each question's legs are prepared
    once per candidate depth (_PreparedLegs), which computes `fusion.answer` for every setting of that depth."""
    rows = [[0.0] * len(legs) for _ in settings]
    by_depth: dict[int, list[int]] = {}
    for position, candidate in enumerate(settings):
        by_depth.setdefault(shape.top_k * candidate.candidate_multiplier, []).append(position)
    for question, (query_legs, judged) in enumerate(zip(legs, judgements, strict=True)):
        for depth, members in by_depth.items():
            prepared = _PreparedLegs(query_legs, depth)
            for position in members:
                passages = prepared.answer(settings[position], shape, calibration)
                rows[position][question] = ndcg_at_10(list(dict.fromkeys(hit.source_id for hit in passages)), judged)
    return ScoreTable(list(settings), rows)


class _PreparedLegs:
    """One question's legs cut to one candidate depth, as arrays over the passages of both: `answer` is
    `fusion.answer`, the same floating-point operations in the same order (so the same scores and order), without
    a dictionary per setting. A setting that runs one leg only takes `fusion.answer` itself."""

    def __init__(self, legs: QueryLegs, depth: int) -> None:
        self.legs = legs
        self.dense, self.keyword = legs.dense[:depth], legs.keyword[:depth]
        by_id = {hit.chunk_id: hit for hit in (*self.keyword, *self.dense)}
        self.passages = list(by_id.values())
        slot = {chunk_id: position for position, chunk_id in enumerate(by_id)}
        # Equal scores are ordered by chunk id, as fusion.answer orders them.
        order = sorted(range(len(self.passages)), key=lambda position: self.passages[position].chunk_id)
        self.id_rank = np.empty(len(order), dtype=np.int64)
        self.id_rank[order] = np.arange(len(order))
        self.dense_slots = np.array([slot[hit.chunk_id] for hit in self.dense], dtype=np.int64)
        self.keyword_slots = np.array([slot[hit.chunk_id] for hit in self.keyword], dtype=np.int64)
        self.dense_ranks = np.arange(1, len(self.dense) + 1, dtype=np.float64)
        self.keyword_ranks = np.arange(1, len(self.keyword) + 1, dtype=np.float64)
        self.dense_normalised = np.array(distribution_normalised([hit.score for hit in self.dense]))
        self.keyword_normalised = np.array(distribution_normalised([hit.score for hit in self.keyword]))

    def answer(
        self, settings: FusionSettings, shape: AnswerShape, calibration: RelevanceCalibration | None
    ) -> list[LegCandidate]:
        both = self.dense and self.keyword and settings.dense_weight > 0 and settings.keyword_weight > 0
        # A third leg (the KB's second model) is fused by fusion.answer itself.
        third = bool(self.legs.second) and settings.second_leg_weight > 0
        if not both or not shape.hybrid or third:
            return answer(self.legs, settings, shape, calibration)
        totals = np.zeros(len(self.passages))
        totals[self.dense_slots] += self._part(settings, settings.dense_weight, self.dense_ranks, self.dense_normalised)
        totals[self.keyword_slots] += self._part(
            settings, settings.keyword_weight, self.keyword_ranks, self.keyword_normalised
        )
        best = np.lexsort((self.id_rank, -totals))[: shape.top_k]
        return assembled([self.passages[position] for position in best], self.dense, shape, calibration)

    @staticmethod
    def _part(
        settings: FusionSettings, weight: float, ranks: NDArray[np.float64], normalised: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        if settings.fusion == "rrf":
            return 1.0 / (settings.rrf_k + ranks / weight)
        return weight * normalised


# -- cross-validation ------------------------------------------------------------------------------------


def fold_of_each_question(questions: int, folds: int, seed: int) -> list[int]:
    """A seeded permutation dealt round-robin: fold sizes differ by at most one."""
    if questions < folds * MIN_QUESTIONS_PER_FOLD:
        raise ValueError(
            f"{folds} folds need at least {folds * MIN_QUESTIONS_PER_FOLD} questions "
            f"({MIN_QUESTIONS_PER_FOLD} per fold); the set has {questions}"
        )
    order = list(range(questions))
    random.Random(seed).shuffle(order)
    assignment = [0] * questions
    for position, question in enumerate(order):
        assignment[question] = position % folds
    return assignment


def best_candidate(table: ScoreTable, questions: Sequence[int]) -> int:
    """The row with the highest mean over `questions`; the first of equals."""
    means = [statistics.fmean(row[q] for q in questions) for row in table.scores]
    return max(range(len(means)), key=lambda row: (means[row], -row))


@dataclass(frozen=True)
class CrossValidation:
    folds: list[FoldResult]
    held_out: HeldOutGain
    recommended: int


def cross_validate(table: ScoreTable, folds: int, seed: int, current: int = 0) -> CrossValidation:
    assignment = fold_of_each_question(table.questions, folds, seed)
    differences = [0.0] * table.questions
    winners = [0.0] * table.questions
    results = []
    for fold in range(folds):
        held = [q for q, f in enumerate(assignment) if f == fold]
        training = [q for q, f in enumerate(assignment) if f != fold]
        winner = best_candidate(table, training)
        for q in held:
            winners[q] = table.scores[winner][q]
            differences[q] = winners[q] - table.scores[current][q]
        winner_mean = statistics.fmean(table.scores[winner][q] for q in held)
        current_mean = statistics.fmean(table.scores[current][q] for q in held)
        results.append(
            FoldResult(
                fold=fold,
                queries=len(held),
                winner=TunedSettings.of(table.settings[winner]),
                winner_ndcg_at_10=_round(winner_mean),
                current_ndcg_at_10=_round(current_mean),
                gain=_round(winner_mean - current_mean),
            )
        )
    low, high = paired_bootstrap_interval(differences, seed)
    held_out = HeldOutGain(
        winner_ndcg_at_10=_round(statistics.fmean(winners)),
        current_ndcg_at_10=_round(statistics.fmean(table.scores[current])),
        gain=_round(statistics.fmean(differences)),
        ci_low=_round(low),
        ci_high=_round(high),
        wins=sum(1 for d in differences if d > 0),
        losses=sum(1 for d in differences if d < 0),
        ties=sum(1 for d in differences if d == 0),
    )
    return CrossValidation(results, held_out, best_candidate(table, range(table.questions)))


def paired_bootstrap_interval(
    differences: Sequence[float], seed: int, resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """The percentile interval of the mean of `differences` (paired per question) over bootstrap resamples."""
    rng = random.Random(seed)
    size = len(differences)
    means = sorted(statistics.fmean(rng.choices(differences, k=size)) for _ in range(resamples))
    tail = (1 - confidence) / 2
    return means[int(tail * resamples)], means[min(resamples - 1, int((1 - tail) * resamples))]


def tune(
    current: KbRetrieval,
    space: TuneSpace,
    legs: Sequence[QueryLegs],
    judgements: Sequence[Mapping[str, int]],
    calibration: RelevanceCalibration | None,
    *,
    folds: int,
    seed: int,
    question_set_id: str,
    second_leg: bool = False,
) -> TuneResult:
    """The whole tune from the questions' legs (fetched `leg_depth` deep)."""
    shape = answer_shape(current)
    settings = candidates(FusionSettings.of(current, second_leg=second_leg), space)
    table = score_candidates(settings, legs, judgements, shape, calibration)
    validated = cross_validate(table, folds, seed)
    recommended = settings[validated.recommended]
    return TuneResult(
        question_set_id=question_set_id,
        queries=table.questions,
        folds=folds,
        seed=seed,
        candidates=len(settings),
        leg_depth=leg_depth(shape, settings),
        current=TunedSettings.of(settings[0]),
        current_ndcg_at_10=_round(statistics.fmean(table.scores[0])),
        fold_results=validated.folds,
        held_out=validated.held_out,
        recommended=TunedSettings.of(recommended),
        recommended_ndcg_at_10=_round(statistics.fmean(table.scores[validated.recommended])),
        changes=validated.recommended != 0,
    )


def answer_shape(retrieval: KbRetrieval) -> AnswerShape:
    return AnswerShape(
        top_k=retrieval.top_k,
        max_blocks=retrieval.max_blocks,
        min_relevance=retrieval.min_relevance,
        hybrid=retrieval.hybrid,
    )


def _round(value: float) -> float:
    return round(value, 4)
