"""The version 2 analyzer (the default for new KBs): every script becomes searchable terms, Latin words are
folded, stop-worded and stemmed per language, and Japanese is analysed exactly as version 1 analyses it."""

from __future__ import annotations

from typing import get_args

import pytest
import Stemmer
from pydantic import ValidationError

from ragkb_analyzer import BIGRAM_PREFIX, Analyzer, bm25_encoder_for, term_id
from ragkb_analyzer.scripts import Script
from ragkb_analyzer.words import stop_words_of
from ragkb_core.kb_settings import LANGUAGE_SCRIPTS, KbAnalyzer, StemLanguage
from ragkb_core.settings import AnalyzerSettings

DEFAULT = Analyzer(KbAnalyzer())
VERSION_1 = Analyzer(KbAnalyzer(words="ascii-lower"))


def matches(config: KbAnalyzer, query: str, document: str) -> bool:
    """Whether the query shares a term with the document, as the engine's sparse search would find it."""
    encoder = bm25_encoder_for(config, AnalyzerSettings())
    return bool(set(encoder.encode_query(query).indices) & set(encoder.encode_document(document).indices))


def test_new_kbs_get_version_2_with_english_stemming_and_stop_words() -> None:
    config = KbAnalyzer()
    assert (config.words, config.languages, config.stop_words) == ("unicode", ["english"], True)
    assert DEFAULT.version == "sudachi-c-norm+uax29-fold-stop-english+title2+bm25-k0.9-b0.6/2+cjk-bigram"
    assert KbAnalyzer(languages=["english", "russian"], stop_words=False).version == (
        "sudachi-c-norm+uax29-fold-english-russian+title2+bm25-k0.9-b0.6/2+cjk-bigram"
    )
    # Lucene's k1 and b, which every KB had before they were set per KB, keep the stamp their indexes carry.
    assert KbAnalyzer(bm25_k1=1.2, bm25_b=0.75).version == "sudachi-c-norm+uax29-fold-stop-english+title2/2+cjk-bigram"
    assert len({DEFAULT.version, VERSION_1.version, Analyzer(KbAnalyzer(languages=[])).version}) == 3


def test_a_name_with_an_accent_stays_one_term_in_every_spelling() -> None:
    assert DEFAULT.terms("Müller") == DEFAULT.terms("MÜLLER") == DEFAULT.terms("muller") == ["muller"]
    assert DEFAULT.terms("Ångström café naïve Søren Łódź straße") == [
        "angstrom", "cafe", "naiv", "soren", "lodz", "strass",
    ]  # fmt: skip


def test_english_words_are_stemmed_and_stop_words_dropped() -> None:
    assert DEFAULT.terms("The vaccines are reducing hospital admissions") == ["vaccin", "reduc", "hospit", "admiss"]
    assert matches(KbAnalyzer(), "vaccinated children", "Vaccination of a child")


def test_possessives_elisions_and_acronyms() -> None:
    assert DEFAULT.terms("Müller's results in the U.S.A.") == ["muller", "result", "usa"]
    assert Analyzer(KbAnalyzer(languages=["french"])).terms("l'homme d'État") == ["homm", "etat"]


def test_numbers_and_symbols_in_scientific_text_survive() -> None:
    assert DEFAULT.terms("IL-6 and TNF-α at 10mg/kg, p53 3.14 1,234.56") == [
        "il", "6", "tnf", "α", "10mg", "kg", "p53", "3.14", "1,234.56",
    ]  # fmt: skip


def test_the_kb_language_chooses_the_stemmer() -> None:
    assert Analyzer(KbAnalyzer(languages=["german"])).terms("Häuser Häusern") == ["haus", "haus"]
    assert Analyzer(KbAnalyzer(languages=[])).terms("running runs") == ["running", "runs"]
    assert Analyzer(KbAnalyzer(stop_words=False)).terms("the runs") == ["the", "run"]


def test_cyrillic_is_searchable_and_stemmed_by_its_own_language() -> None:
    assert DEFAULT.terms("Привет, мир!") == ["привет", "мир"]
    mixed = KbAnalyzer(languages=["english", "russian"])
    assert Analyzer(mixed).terms("Красивые города running") == ["красив", "город", "run"]
    assert matches(mixed, "город", "большие города")


def test_greek_arabic_and_hebrew_lose_accents_and_vowel_points() -> None:
    assert DEFAULT.terms("Ελληνικά ΚΕΊΜΕΝΑ") == ["ελληνικα", "κειμενα"]
    assert DEFAULT.terms("العَرَبِيَّة") == DEFAULT.terms("العربية") == ["العربية"]
    assert DEFAULT.terms("שָׁלוֹם") == ["שלום"]


def test_indic_vowel_signs_are_kept() -> None:
    assert DEFAULT.terms("हिन्दी भाषा") == ["हिन्दी", "भाषा"]


def test_korean_words_are_kept_whole_and_found_by_their_stem() -> None:
    analysis = DEFAULT.analyze("학교에서 공부")
    bigrams = [BIGRAM_PREFIX + pair for pair in ("학교", "교에", "에서", "공부")]
    assert analysis.terms == ["학교에서", "공부", *bigrams]
    assert analysis.length == 2  # the bigrams are extra terms: they do not lengthen the text for BM25
    assert matches(KbAnalyzer(), "학교", "학생들이 학교에서 공부합니다")


def test_thai_without_spaces_becomes_grapheme_bigrams() -> None:
    terms = DEFAULT.terms("ภาษาไทย")
    assert terms == [BIGRAM_PREFIX + pair for pair in ("ภา", "าษ", "ษา", "าไ", "ไท", "ทย")]
    assert matches(KbAnalyzer(), "ไทย", "ฉันเรียนภาษาไทยทุกวัน")


def test_no_script_is_dropped() -> None:
    for text in ("Müller", "Привет", "Ελλάδα", "안녕", "ภาษา", "مرحبا", "שלום", "हिन्दी", "தமிழ்", "Հայերեն", "東京"):
        assert DEFAULT.terms(text), text


def test_japanese_is_analysed_as_version_1_analyses_it() -> None:
    for text in ("就業規則では有給休暇は何日ですか？", "選挙管理委員会は年次有給休暇の申請を受け付けます。"):
        assert DEFAULT.analyze(text) == VERSION_1.analyze(text)
    mode_a = {"sudachi_mode_a_subwords": True}
    text = "選挙管理委員会の申請"
    assert Analyzer(KbAnalyzer(**mode_a)).terms(text) == Analyzer(KbAnalyzer(words="ascii-lower", **mode_a)).terms(text)


def test_a_word_gives_the_same_terms_inside_japanese_text_as_outside_it() -> None:
    terms = DEFAULT.terms("東京都のMüller's running shoesを買った。don't 안녕하세요")
    assert terms[:3] == ["東京都", "の", *DEFAULT.terms("Müller's")]
    for words in ("running shoes", "don't", "안녕하세요"):
        assert all(term in terms for term in DEFAULT.terms(words)), words
    assert matches(KbAnalyzer(), "running", "ランニングシューズ(running shoes)を買った")
    assert matches(KbAnalyzer(), "Müller", "ミュラー(Müller)氏")


def test_languages_are_one_per_script() -> None:
    with pytest.raises(ValidationError):
        KbAnalyzer(languages=["english", "french"])
    with pytest.raises(ValidationError):
        KbAnalyzer(languages=["hindi", "nepali"])
    assert KbAnalyzer(languages=["french", "russian", "greek"]).languages == ["french", "russian", "greek"]


def test_every_language_has_a_stemmer_and_a_known_script() -> None:
    assert set(LANGUAGE_SCRIPTS) == set(get_args(StemLanguage))
    assert set(LANGUAGE_SCRIPTS.values()) <= set(get_args(Script))
    for language in get_args(StemLanguage):
        assert Stemmer.Stemmer(language).stemWord("test")
    assert "the" in stop_words_of("english") and "und" in stop_words_of("german") and "и" in stop_words_of("russian")
    assert stop_words_of("greek") == frozenset()  # no list shipped: nothing is dropped


def test_the_title_counts_twice_in_a_chunks_keyword_terms_from_version_2_on() -> None:
    settings = AnalyzerSettings()
    chunk = "Aspirin trial\nPatients took aspirin daily."  # as the worker indexes it: title, then the chunk
    for config, title_weight in (
        (KbAnalyzer(), 2),
        (KbAnalyzer(title_weight=1), 1),
        (KbAnalyzer(words="ascii-lower"), 1),
    ):
        encoder = bm25_encoder_for(config, settings)
        with_title = encoder.encode_document(chunk, "Aspirin trial")
        expected = encoder.term_weights(
            encoder.analyzer.analyze("\n".join(["Aspirin trial"] * (title_weight - 1) + [chunk]))
        )
        assert dict(zip(with_title.indices, with_title.values, strict=True)) == pytest.approx(
            {term_id(term): weight for term, weight in expected.items()}
        )
    assert KbAnalyzer().title_weight == 2 and KbAnalyzer.model_validate({"words": "ascii-lower"}).title_weight == 1
    with pytest.raises(ValidationError):
        KbAnalyzer(words="ascii-lower", title_weight=2)
