from __future__ import annotations

import math

from ragkb_analyzer import Analyzer, Bm25Encoder, term_id
from ragkb_core.kb_settings import KbAnalyzer
from ragkb_core.settings import AnalyzerSettings

# Sudachi alone (the word terms every configuration starts with), with version 1's Latin words.
ANALYZER = Analyzer(KbAnalyzer(words="ascii-lower", char_bigrams=False))


def test_japanese_compounds_stay_whole_in_mode_c() -> None:
    terms = ANALYZER.terms("就業規則では有給休暇は何日ですか？")
    assert "就業規則" in terms
    assert "有給休暇" in terms
    assert "？" not in terms and "?" not in terms


def test_normalized_forms_unify_spelling_variants() -> None:
    assert ANALYZER.terms("シュミレーション") == ANALYZER.terms("シミュレーション")


def test_latin_words_are_lower_cased_and_width_folded() -> None:
    assert ANALYZER.terms("COVID-19 Vaccines ＡＢＣ") == ["covid", "19", "vaccines", "abc"]


def test_mixed_script_text_yields_both_kinds_of_terms() -> None:
    terms = ANALYZER.terms("Qdrantで検索する")
    assert "qdrant" in terms and "検索" in terms


def test_term_ids_are_stable_32_bit_values() -> None:
    assert term_id("有給休暇") == term_id("有給休暇")
    assert term_id("a") != term_id("b")
    assert 0 <= term_id("anything") < 2**32


def test_bm25_document_weights_follow_the_formula() -> None:
    settings = AnalyzerSettings(avg_len=4)
    encoder = Bm25Encoder(ANALYZER, settings)  # version 1: Lucene's k1 1.2 and b 0.75
    vector = encoder.encode_document("apple apple banana")
    weights = dict(zip(vector.indices, vector.values, strict=True))
    norm = 1.2 * (1 - 0.75 + 0.75 * 3 / 4)
    assert math.isclose(weights[term_id("apple")], 2 * 2.2 / (2 + norm))
    assert math.isclose(weights[term_id("banana")], 1 * 2.2 / (1 + norm))


def test_query_weights_are_one_per_distinct_term() -> None:
    vector = Bm25Encoder(ANALYZER, AnalyzerSettings()).encode_query("apple apple pie")
    assert sorted(vector.values) == [1.0, 1.0]
    assert vector.indices == sorted(vector.indices)


def test_very_long_text_is_analysed_in_pieces() -> None:
    text = ("有給休暇の申請について。" * 2000 + "\n") * 3
    assert ANALYZER.terms(text).count("有給休暇") == 6000
