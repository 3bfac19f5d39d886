"""Per-KB analyzer configurations of version 1 (words="ascii-lower", what every KB created before version 2 is
stored with): each has its own version, only the terms it adds differ, and its terms never change (an index
built with them is searched with them until it is re-indexed)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ragkb_analyzer import ANALYZER_VERSION, BIGRAM_PREFIX, Analyzer, bm25_encoder_for, term_id
from ragkb_core.kb_settings import KbAnalyzer
from ragkb_core.settings import AnalyzerSettings

V1 = "ascii-lower"
# Sudachi alone: what every KB was indexed with before the analyzer was a setting.
DEFAULT = Analyzer(KbAnalyzer(words=V1, char_bigrams=False))
MODE_A = Analyzer(KbAnalyzer(words=V1, sudachi_mode_a_subwords=True, char_bigrams=False))
BIGRAMS = Analyzer(KbAnalyzer(words=V1, char_bigrams=True))
BOTH = Analyzer(KbAnalyzer(words=V1, sudachi_mode_a_subwords=True, char_bigrams=True))
PLAIN_BIGRAM = Analyzer(KbAnalyzer(words=V1, japanese="char-bigram"))
ALL = (DEFAULT, MODE_A, BIGRAMS, BOTH, PLAIN_BIGRAM)
JAPANESE = "選挙管理委員会は年次有給休暇の申請を受け付けます。"
ENGLISH = "COVID-19 Vaccines reduce hospital admissions."


def test_sudachi_alone_keeps_the_version_existing_indexes_carry() -> None:
    assert DEFAULT.version == ANALYZER_VERSION == "sudachi-c-norm+latin-lower/1"
    assert BIGRAMS.version == "sudachi-c-norm+latin-lower/1+cjk-bigram"


def test_a_stored_version_1_analyzer_reads_back_as_version_1() -> None:
    # As migration 0010 leaves a KB created before version 2 (0005 wrote the first three fields out in full).
    stored = {"japanese": "sudachi", "sudachi_mode_a_subwords": False, "char_bigrams": True, "words": V1}
    config = KbAnalyzer.model_validate(stored)
    assert config.languages == [] and config.stop_words is False
    assert config.version == BIGRAMS.version
    assert KbAnalyzer.model_validate(config.model_dump()) == config


def test_version_1_terms_of_every_script_are_unchanged() -> None:
    # Golden terms of the version 1 analyzer: Latin a-z/0-9 runs only ("Müller" → m, ller; Korean, Cyrillic
    # and Thai give nothing), Japanese by Sudachi with the Latin runs of each morpheme.
    text = "Müller's café — Привет 안녕하세요 ภาษาไทย; iPhoneを買った。"
    assert BIGRAMS.terms(text) == [
        "m", "ller", "s", "caf", "iphone", "を", "買う", "た",
        "\x02を買", "\x02買っ", "\x02った",
    ]  # fmt: skip
    assert PLAIN_BIGRAM.terms(text) == [
        "m", "ller's", "caf", "iphone", "\x02を買", "\x02買っ", "\x02った",
    ]  # fmt: skip


def test_every_configuration_has_its_own_version() -> None:
    versions = [analyzer.version for analyzer in ALL]
    assert len(set(versions)) == len(versions)
    assert PLAIN_BIGRAM.version == "cjk-bigram+latin-lower/1"


def test_default_terms_are_unchanged() -> None:
    assert DEFAULT.terms(JAPANESE) == [
        "選挙管理委員会",
        "は",
        "年次有給休暇",
        "の",
        "申請",
        "を",
        "受け付ける",
        "ます",
    ]
    assert DEFAULT.terms(ENGLISH) == ["covid", "19", "vaccines", "reduce", "hospital", "admissions"]


def test_extras_only_add_terms_after_the_default_ones() -> None:
    default_terms = DEFAULT.terms(JAPANESE)
    for analyzer in (MODE_A, BIGRAMS, BOTH):
        analysis = analyzer.analyze(JAPANESE)
        assert analysis.terms[: len(default_terms)] == default_terms
        assert analysis.length == len(default_terms)  # extra terms do not lengthen the text for BM25


def test_english_is_the_same_under_every_configuration() -> None:
    for analyzer in ALL:
        assert analyzer.terms(ENGLISH) == DEFAULT.terms(ENGLISH)


def test_mode_a_adds_the_parts_of_compounds() -> None:
    terms = MODE_A.terms(JAPANESE)
    assert {"選挙", "管理", "委員", "年次", "有給", "休暇"} <= set(terms)
    assert "選挙管理委員会" in terms and "年次有給休暇" in terms
    # A word that mode A does not split adds nothing.
    assert terms.count("申請") == 1


def test_bigrams_are_prefixed_apart_from_words() -> None:
    extras = BIGRAMS.terms("東京都に行く")[len(DEFAULT.terms("東京都に行く")) :]
    assert extras == [BIGRAM_PREFIX + bigram for bigram in ("東京", "京都", "都に", "に行", "行く")]
    assert term_id(BIGRAM_PREFIX + "東京") != term_id("東京")


def test_a_one_character_run_gives_its_unigram() -> None:
    assert BIGRAMS.terms("A 日 B")[-1] == BIGRAM_PREFIX + "日"


def test_the_plain_bigram_analyzer_has_no_sudachi_terms() -> None:
    terms = PLAIN_BIGRAM.terms("年次有給休暇はCOVID対策")
    assert terms == [BIGRAM_PREFIX + b for b in ("年次", "次有", "有給", "給休", "休暇", "暇は")] + [
        "covid",
        BIGRAM_PREFIX + "対策",
    ]


def test_extra_terms_need_sudachi() -> None:
    with pytest.raises(ValidationError):
        KbAnalyzer(japanese="char-bigram", char_bigrams=True)
    with pytest.raises(ValidationError):
        KbAnalyzer(japanese="char-bigram", sudachi_mode_a_subwords=True)


def test_version_1_has_no_stemming_or_stop_words() -> None:
    with pytest.raises(ValidationError):
        KbAnalyzer(words=V1, languages=["english"])
    with pytest.raises(ValidationError):
        KbAnalyzer(words=V1, stop_words=True)


def test_version_1_weighs_terms_with_lucenes_k1_and_b_only() -> None:
    assert (KbAnalyzer(words=V1).bm25_k1, KbAnalyzer(words=V1).bm25_b) == (1.2, 0.75)
    with pytest.raises(ValidationError):
        KbAnalyzer(words=V1, bm25_k1=0.9)


@pytest.mark.parametrize("field", [{"bm25_k1": 0}, {"bm25_k1": 3.5}, {"bm25_b": -0.1}, {"bm25_b": 1.1}])
def test_bm25_parameters_out_of_range_are_refused(field: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        KbAnalyzer.model_validate(field)


def test_a_kbs_k1_and_b_weigh_its_chunks_terms() -> None:
    """tf·(k1+1) / (tf + k1·(1 − b + b·len/avg_len)) with the KB's k1 and b: here one term, once, in a text of
    avg_len words, so its weight is (k1+1) / (1 + k1) = 1 whatever k1 is, and b shows with a longer text."""
    settings = AnalyzerSettings(avg_len=4)
    text = "ferry timetable harbour lighthouse"
    for k1, b in ((1.2, 0.75), (0.9, 0.6), (2.0, 0.0)):
        encoder = bm25_encoder_for(KbAnalyzer(bm25_k1=k1, bm25_b=b, languages=[], stop_words=False), settings)
        assert encoder.encode_document(text).values == pytest.approx([1.0] * 4)
        doubled = encoder.encode_document(f"{text} {text}")  # tf 2 in a text of twice avg_len words
        assert doubled.values == pytest.approx([2 * (k1 + 1) / (2 + k1 * (1 - b + b * 2))] * 4)


def test_encoders_are_made_once_per_configuration() -> None:
    settings = AnalyzerSettings()
    first = bm25_encoder_for(KbAnalyzer(words=V1, char_bigrams=True), settings)
    assert bm25_encoder_for(KbAnalyzer(words=V1, char_bigrams=True), settings) is first
    assert bm25_encoder_for(KbAnalyzer(words=V1, char_bigrams=False), settings) is not first
    assert bm25_encoder_for(KbAnalyzer(), settings) is not first
    assert first.version == "sudachi-c-norm+latin-lower/1+cjk-bigram"


def test_a_query_matches_a_compound_by_its_part_only_with_mode_a() -> None:
    settings = AnalyzerSettings()
    document = "年次有給休暇の申請"
    sudachi_alone = KbAnalyzer(words=V1, char_bigrams=False)
    with_parts = KbAnalyzer(words=V1, sudachi_mode_a_subwords=True, char_bigrams=False)
    for config, matches in ((sudachi_alone, False), (with_parts, True)):
        encoder = bm25_encoder_for(config, settings)
        shared = set(encoder.encode_query("休暇").indices) & set(encoder.encode_document(document).indices)
        assert bool(shared) is matches


def test_term_weights_are_what_a_document_is_encoded_with() -> None:
    encoder = bm25_encoder_for(KbAnalyzer(words=V1, char_bigrams=True), AnalyzerSettings())
    weights = encoder.term_weights(encoder.analyzer.analyze(JAPANESE))
    vector = encoder.encode_document(JAPANESE)
    by_id = dict(zip(vector.indices, vector.values, strict=True))
    assert all(by_id[term_id(term)] == weight for term, weight in weights.items())
