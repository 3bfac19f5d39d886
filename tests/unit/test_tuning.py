"""The tune's arithmetic: answers computed from legs, nDCG@10, folds, the choice per fold and the bootstrap
interval of the held-out gain."""

from __future__ import annotations

import random
import statistics

import pytest

from ragkb_core.fusion import (
    AnswerShape,
    FusionSettings,
    LegCandidate,
    QueryLegs,
    answer,
    fused_scores,
    same_up_to_ties,
)
from ragkb_core.kb_settings import KbRetrieval, RelevanceCalibration
from ragkb_core.metrics import score_queries
from ragkb_core.tuning import (
    ScoreTable,
    TuneSpace,
    _PreparedLegs,
    candidates,
    cross_validate,
    fold_of_each_question,
    ndcg_at_10,
    paired_bootstrap_interval,
    tune,
)

SHAPE = AnswerShape(top_k=3, max_blocks=3, min_relevance=0.0)
RRF = FusionSettings("rrf", 60, 1.0, 1.0, 2)
DBSF = FusionSettings("dbsf", 60, 1.0, 1.0, 2)


def hit(chunk: str, score: float, source: str | None = None, text: str | None = None) -> LegCandidate:
    return LegCandidate(chunk_id=chunk, source_id=source or chunk, score=score, text_key=text or chunk)


LEGS = QueryLegs(
    dense=[hit("a", 0.9), hit("b", 0.8), hit("c", 0.7), hit("d", 0.6), hit("e", 0.5), hit("f", 0.4)],
    keyword=[hit("c", 12.0), hit("x", 9.0), hit("a", 3.0), hit("y", 2.0), hit("z", 1.0), hit("b", 0.5)],
)


def test_rrf_is_the_paper_formula_with_rank_scaling_weights_over_legs_cut_to_the_candidate_depth() -> None:
    settings = FusionSettings("rrf", 60, 1.0, 2.0, 2)  # 3 × 2 = 6 candidates a leg: all of them
    scores = fused_scores(LEGS.dense, LEGS.keyword, settings)
    assert scores["a"] == pytest.approx(1 / 61 + 1 / (60 + 3 / 2))
    assert scores["x"] == pytest.approx(1 / (60 + 2 / 2))
    shallow = answer(LEGS, FusionSettings("rrf", 60, 1.0, 1.0, 1), SHAPE, None)
    # Three candidates a leg (top_k 3 × 1): a and c, in both, tie at 1/61 + 1/63 (equal scores by id), then b and x
    # tie at 1/62; y, z and the deeper dense passages are not candidates at all.
    assert [h.chunk_id for h in shallow] == ["a", "c", "b"]


def test_dbsf_normalises_each_leg_by_mean_and_three_sample_deviations() -> None:
    scores = fused_scores(LEGS.dense[:2], LEGS.keyword[:2], FusionSettings("dbsf", 60, 1.0, 1.0, 1))
    dense_sd = statistics.stdev([0.9, 0.8])
    keyword_sd = statistics.stdev([12.0, 9.0])
    assert scores["a"] == pytest.approx((0.9 - (0.85 - 3 * dense_sd)) / (6 * dense_sd))
    assert scores["x"] == pytest.approx((9.0 - (10.5 - 3 * keyword_sd)) / (6 * keyword_sd))


def test_an_answer_keeps_one_passage_per_text_and_drops_what_is_under_the_floor() -> None:
    legs = QueryLegs(
        dense=[hit("a", 0.95), hit("b", 0.95, text="a"), hit("c", 0.5)],
        keyword=[hit("k", 5.0)],
    )
    calibration = RelevanceCalibration(midpoint=0.8, steepness=40)
    shape = AnswerShape(top_k=4, max_blocks=4, min_relevance=0.5)
    kept = [h.chunk_id for h in answer(legs, DBSF, shape, calibration)]
    # b repeats a's text; c's cosine is far under the midpoint; k (keyword only) takes the dense leg's lowest.
    assert kept == ["a"]
    without_floor = answer(legs, DBSF, shape.model_copy(update={"min_relevance": 0.0}), calibration)
    assert [h.chunk_id for h in without_floor] == ["a", "k", "c"]


def test_the_floor_reads_each_candidates_keyword_coverage_where_the_calibration_weighs_it() -> None:
    """A tune cuts where the search cuts: the legs carry the question's keyword coverage of every candidate."""
    covered = hit("k", 5.0).model_copy(update={"coverage": 1.0})
    legs = QueryLegs(
        dense=[hit("a", 0.82).model_copy(update={"coverage": 0.0}), hit("c", 0.5).model_copy(update={"coverage": 0.0})],
        keyword=[covered],
    )
    calibration = RelevanceCalibration(midpoint=0.8, steepness=40, coverage_weight=0.5, coverage_neutral=0.5)
    shape = AnswerShape(top_k=4, max_blocks=4, min_relevance=0.5)
    # a's cosine is over the midpoint but its question shares no word with it; k (keyword only, the dense leg's
    # lowest cosine 0.5) holds every word of the question: 0.5 + 0.5 × (1 − 0.5) = 0.75, still under 0.8.
    assert [h.chunk_id for h in answer(legs, DBSF, shape, calibration)] == []
    assert [h.chunk_id for h in answer(legs, DBSF, shape, calibration.model_copy(update={"coverage_weight": 0.0}))] == [
        "a"
    ]
    generous = calibration.model_copy(update={"coverage_weight": 1.0})
    assert [h.chunk_id for h in answer(legs, DBSF, shape, generous)] == ["k"]


def test_a_leg_of_weight_zero_or_a_semantic_kb_answers_the_dense_leg_cut_to_top_k() -> None:
    dense_only = FusionSettings("dbsf", 60, 1.0, 0.0, 2)
    assert [h.chunk_id for h in answer(LEGS, dense_only, SHAPE, None)] == ["a", "b", "c"]
    semantic = SHAPE.model_copy(update={"hybrid": False})
    assert [h.chunk_id for h in answer(LEGS, RRF, semantic, None)] == ["a", "b", "c"]


def test_ndcg_at_10_is_the_evaluations_metric() -> None:
    qrels = {"q1": {"a": 2, "b": 1, "n": 0}, "q2": {"z": 1}, "q3": {"a": 1, "b": 3, "c": 2}}
    rankings = {"q1": ["x", "b", "a", "n"], "q2": ["a", "b"], "q3": ["c", "a", "y", "b"]}
    expected = score_queries(qrels, rankings, 100)
    for query_id, ranked in rankings.items():
        assert ndcg_at_10(ranked, qrels[query_id]) == pytest.approx(expected[query_id]["ndcg@10"], abs=1e-9)


def test_folds_are_seeded_balanced_and_need_two_questions_each() -> None:
    folds = fold_of_each_question(23, 5, seed=7)
    assert folds == fold_of_each_question(23, 5, seed=7) != fold_of_each_question(23, 5, seed=8)
    sizes = [folds.count(fold) for fold in range(5)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 23
    with pytest.raises(ValueError, match="at least 10 questions"):
        fold_of_each_question(9, 5, seed=1)


def test_a_candidate_better_on_every_question_wins_every_fold_and_its_gain_has_a_tight_interval() -> None:
    current = [0.5, 0.2, 0.9, 0.4, 0.6, 0.3, 0.7, 0.1]
    better = [value + 0.1 for value in current]
    worse = [value - 0.2 for value in current]
    table = ScoreTable([RRF, DBSF, FusionSettings("rrf", 10, 1.0, 1.0, 2)], [current, better, worse])
    validated = cross_validate(table, folds=4, seed=3)
    assert all(fold.winner.label == DBSF.label() for fold in validated.folds)
    assert all(fold.gain == pytest.approx(0.1) for fold in validated.folds)
    assert validated.held_out.gain == pytest.approx(0.1)
    assert (validated.held_out.ci_low, validated.held_out.ci_high) == pytest.approx((0.1, 0.1))
    assert (validated.held_out.wins, validated.held_out.losses) == (8, 0)
    assert validated.recommended == 1


def test_the_winner_is_chosen_on_the_training_folds_only() -> None:
    """Candidate 1 is perfect on two questions and useless elsewhere: wherever those two are held out, the
    training folds cannot see it, so the held-out gain is what it earns on the questions it was not chosen on."""
    current = [0.5] * 8
    lucky = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    table = ScoreTable([RRF, DBSF], [current, lucky])
    validated = cross_validate(table, folds=4, seed=1)
    # Current wins on every training set (mean 0.5 ≥ lucky's ≤ 2/6), so the held-out gain is exactly 0.
    assert validated.held_out.gain == 0 and validated.recommended == 0
    assert validated.held_out.ties == 8


def test_the_bootstrap_interval_covers_the_mean_and_narrows_with_more_questions() -> None:
    few = [0.3, -0.1, 0.2, 0.0, 0.1, -0.2, 0.4, 0.05]
    low, high = paired_bootstrap_interval(few, seed=5)
    assert low < statistics.fmean(few) < high
    many = few * 25
    low_many, high_many = paired_bootstrap_interval(many, seed=5)
    assert high_many - low_many < (high - low) / 3
    assert paired_bootstrap_interval(few, seed=5) == (low, high)


def test_the_default_space_holds_the_current_settings_first_and_no_repeats() -> None:
    current = FusionSettings.of(KbRetrieval())
    settings = candidates(current, TuneSpace())
    assert settings[0] == current
    assert len(settings) == len(set(settings)) == 5 * 5 * (1 + 5)
    with pytest.raises(ValueError):
        TuneSpace(rrf_k=[0])


def test_a_whole_tune_recommends_the_keyword_leg_where_only_it_finds_the_relevant_documents() -> None:
    legs, judgements = [], []
    for q in range(10):
        dense = [hit(f"d{q}-{i}", 0.9 - i * 0.01) for i in range(20)]
        keyword = [hit(f"rel{q}", 20.0)] + [hit(f"d{q}-{i}", 10.0 - i) for i in range(5)]
        legs.append(QueryLegs(dense=dense, keyword=keyword))
        judgements.append({f"rel{q}": 1})
    current = KbRetrieval(top_k=3, max_blocks=3, keyword_weight=0.5)
    result = tune(current, TuneSpace(), legs, judgements, None, folds=5, seed=1, question_set_id="s")
    assert result.queries == 10 and len(result.fold_results) == 5 and result.candidates > 100
    assert result.held_out.gain > 0 and result.held_out.ci_low > 0
    assert result.changes and result.recommended_ndcg_at_10 > result.current_ndcg_at_10
    assert result.held_out.current_ndcg_at_10 == result.current_ndcg_at_10


def test_a_computed_answer_matches_the_served_one_up_to_the_order_of_equal_scores() -> None:
    served = [("a", 0.9), ("b", 0.5), ("c", 0.5), ("d", 0.1)]
    assert same_up_to_ties(served, ["a", "c", "b", "d"])
    assert not same_up_to_ties(served, ["a", "b", "d", "c"])
    assert not same_up_to_ties(served, ["a", "b", "c"])
    # The last group was cut by top_k: which of the equals made it may differ.
    assert same_up_to_ties([("a", 0.9), ("b", 0.5)], ["a", "x"])


def test_scoring_every_setting_at_once_computes_exactly_what_answer_computes() -> None:
    """The tune's array path (per question and depth) against fusion.answer, setting by setting, on legs with
    ties, passages in one leg only, repeated texts and a relevance floor."""
    rng = random.Random(4)
    calibration = RelevanceCalibration(midpoint=0.5, steepness=10)
    shape = AnswerShape(top_k=4, max_blocks=3, min_relevance=0.3)
    settings = candidates(FusionSettings("dbsf", 60, 1.0, 1.0, 3), TuneSpace(candidate_multiplier=[1, 2, 5]))
    for _ in range(30):
        pool = [f"c{n:02d}" for n in range(30)]
        dense = [hit(c, round(rng.random(), 2), f"doc{rng.randrange(8)}", f"t{rng.randrange(25)}") for c in pool[:20]]
        dense.sort(key=lambda h: -h.score)
        keyword = [hit(c, float(rng.randrange(1, 6)), "doc-k", c) for c in rng.sample(pool, 15)]
        keyword.sort(key=lambda h: -h.score)
        legs = QueryLegs(dense=dense, keyword=keyword)
        for candidate in settings:
            prepared = _PreparedLegs(legs, shape.top_k * candidate.candidate_multiplier)
            expected = answer(legs, candidate, shape, calibration)
            assert prepared.answer(candidate, shape, calibration) == expected, candidate


SECOND_LEGS = LEGS.model_copy(
    update={"second": [hit("z", 0.95), hit("e", 0.9), hit("a", 0.5), hit("q", 0.45), hit("b", 0.4), hit("c", 0.3)]}
)


@pytest.mark.parametrize(("fusion", "weight"), [("dbsf", 1.5), ("dbsf", 3.0), ("rrf", 1.5)])
def test_a_kbs_second_model_leg_is_fused_as_the_retriever_fuses_it_and_the_tune_computes_the_same(
    fusion: str, weight: float
) -> None:
    """A third leg (KbChunking.second_model) with its weight: the tune's answer (both of its paths) is the
    retriever's fusion (ragkb_retriever.index.port.fuse) of the same three legs; weight 0 drops the leg."""
    from ragkb_retriever.index.port import FuseHere, IndexHit, fuse

    settings = FusionSettings(fusion, 60, 1.0, 1.0, 2, weight)  # type: ignore[arg-type]
    legs = [
        [IndexHit(h.chunk_id, h.score, {}) for h in leg]
        for leg in (SECOND_LEGS.dense, SECOND_LEGS.keyword, SECOND_LEGS.second)
    ]
    served = fuse(legs, FuseHere(settings.fusion, (1.0, 1.0, weight), 61), SHAPE.top_k)
    computed = answer(SECOND_LEGS, settings, SHAPE, None)
    assert [h.chunk_id for h in computed] == [h.id for h in served]
    assert [h.chunk_id for h in _PreparedLegs(SECOND_LEGS, 6).answer(settings, SHAPE, None)] == [h.id for h in served]
    if weight == 3.0:  # z: first in the second leg, last in the keyword leg, not in the dense leg
        assert [h.chunk_id for h in computed] == ["z", "a", "e"]
    without = FusionSettings(fusion, 60, 1.0, 1.0, 2, 0.0)  # type: ignore[arg-type]
    assert answer(SECOND_LEGS, without, SHAPE, None) == answer(LEGS, without, SHAPE, None)
    assert candidates(settings, TuneSpace(keyword_weight=[1.0, 2.0]))[1].second_weight == weight
