"""A passage's 0–1 relevance: the calibrated logistic of its dense cosine and the question's keyword coverage of it,
the model's calibration by default."""

from __future__ import annotations

import pytest

from ragkb_core.fusion import keyword_coverage, relevance
from ragkb_core.kb_settings import DEFAULT_MIN_RELEVANCE, PACKAGED_E5_RELEVANCE, KbRetrieval, RelevanceCalibration
from ragkb_core.settings import PACKAGED_E5_MODEL, EmbeddingModelSpec, EmbeddingSettings

CALIBRATION = RelevanceCalibration(midpoint=0.8, steepness=40)


def test_relevance_is_a_monotone_zero_to_one_mapping_centred_on_the_midpoint() -> None:
    values = [relevance(cosine, CALIBRATION) for cosine in (-1.0, 0.6, 0.75, 0.8, 0.85, 0.95, 1.0)]
    assert values == sorted(values) and all(0.0 <= value <= 1.0 for value in values)
    assert relevance(0.8, CALIBRATION) == pytest.approx(0.5)
    assert relevance(-1.0, CALIBRATION) < 1e-6 and relevance(1.0, CALIBRATION) > 0.99


def test_each_model_has_its_own_calibration_and_an_uncalibrated_one_has_none() -> None:
    minilm = RelevanceCalibration(midpoint=0.3, steepness=12)
    settings = EmbeddingSettings(
        allowed_models={"all-MiniLM-L6-v2": EmbeddingModelSpec(relevance=minilm), "bge-small": EmbeddingModelSpec()}
    )
    assert settings.relevance_of(None) == settings.relevance_of(PACKAGED_E5_MODEL) == PACKAGED_E5_RELEVANCE
    assert settings.relevance_of("all-MiniLM-L6-v2") == minilm
    assert settings.relevance_of("bge-small") is None
    assert settings.for_model("all-MiniLM-L6-v2").relevance_of() == minilm
    assert EmbeddingSettings(model="some/other-model").relevance_of() is None


def test_the_floor_is_a_retrieval_setting_with_a_documented_default() -> None:
    assert KbRetrieval().min_relevance == DEFAULT_MIN_RELEVANCE
    assert KbRetrieval(min_relevance=0.3).min_relevance == 0.3
    with pytest.raises(ValueError):
        KbRetrieval(min_relevance=1.5)


def test_keyword_coverage_weighs_the_questions_terms_by_idf() -> None:
    idfs = {1: 4.0, 2: 1.0, 3: 5.0}
    assert keyword_coverage([1, 2, 3], {1, 2, 3, 9}, idfs) == 1.0
    assert keyword_coverage([1, 2, 3], {9}, idfs) == 0.0
    # The rare term found counts for more than the common one.
    assert keyword_coverage([1, 2, 3], {3}, idfs) == pytest.approx(0.5)
    assert keyword_coverage([1, 2, 3], {2}, idfs) == pytest.approx(0.1)
    # A question term repeated counts once; a question without terms covers nothing.
    assert keyword_coverage([1, 1, 2], {1}, idfs) == pytest.approx(0.8)
    assert keyword_coverage([], {1}, idfs) == 0.0


def test_coverage_moves_the_relevance_around_its_neutral_value_and_unknown_counts_as_neutral() -> None:
    calibration = RelevanceCalibration(midpoint=0.8, steepness=40, coverage_weight=0.1, coverage_neutral=0.4)
    assert relevance(0.8, calibration, 0.4) == pytest.approx(0.5)
    assert relevance(0.8, calibration, None) == pytest.approx(0.5)
    assert relevance(0.8, calibration, 1.0) == pytest.approx(relevance(0.86, calibration, 0.4))
    assert relevance(0.8, calibration, 0.0) < 0.5 < relevance(0.8, calibration, 0.9)
    # Without a coverage weight the relevance is the cosine's alone, whatever the coverage.
    assert relevance(0.83, CALIBRATION, 0.0) == relevance(0.83, CALIBRATION, 1.0) == relevance(0.83, CALIBRATION)
    with pytest.raises(ValueError):
        RelevanceCalibration(midpoint=0.8, steepness=40, coverage_weight=1.5)
