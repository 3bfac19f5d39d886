"""Per-KB retrieval settings: defaults, bounds, overrides, and how several KBs' settings combine."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ragkb_api.search.service import merged_quotas
from ragkb_core.kb_settings import KbAnalyzer, KbRetrieval, RetrievalOverrides


def test_the_defaults_are_the_documented_ones() -> None:
    settings = KbRetrieval()
    assert (settings.top_k, settings.hybrid, settings.rrf_k, settings.candidate_multiplier) == (12, True, 60, 7)
    assert (settings.score_threshold, settings.max_blocks, settings.rerank, settings.doc_type_quotas) == (
        0,
        12,
        None,
        None,
    )


@pytest.mark.parametrize(
    "invalid",
    [{"top_k": 0}, {"score_threshold": 1.5}, {"candidate_multiplier": 0}, {"dense_weight": 0, "keyword_weight": 0}],
)
def test_out_of_bounds_settings_are_refused(invalid: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        KbRetrieval.model_validate(invalid)


def test_a_request_overrides_only_what_it_names_and_stays_within_bounds() -> None:
    stored = KbRetrieval(top_k=5, score_threshold=0.3)
    effective = stored.with_overrides(RetrievalOverrides(top_k=20))
    assert (effective.top_k, effective.score_threshold) == (20, 0.3)
    with pytest.raises(ValidationError):
        RetrievalOverrides(top_k=10_000)


def test_quotas_across_kbs_take_the_smallest_per_doc_type() -> None:
    kbs = [KbRetrieval(doc_type_quotas={"reference": 4}), KbRetrieval(doc_type_quotas={"reference": 2, "knowledge": 8})]
    assert merged_quotas(kbs) == {"reference": 2, "knowledge": 8}
    assert merged_quotas([KbRetrieval()]) is None


def test_analyzer_versions_differ_per_configuration_and_sudachi_alone_keeps_the_old_one() -> None:
    assert KbAnalyzer(words="ascii-lower", char_bigrams=False).version == "sudachi-c-norm+latin-lower/1"
    assert KbAnalyzer().char_bigrams and KbAnalyzer(japanese="char-bigram").char_bigrams is False
    variants = [
        KbAnalyzer(char_bigrams=False),
        KbAnalyzer(sudachi_mode_a_subwords=True),
        KbAnalyzer(japanese="char-bigram"),
    ]
    assert len({KbAnalyzer().version, *(variant.version for variant in variants)}) == 4
    with pytest.raises(ValidationError):
        KbAnalyzer(japanese="char-bigram", char_bigrams=True)
