"""Words of every script except Japanese: Unicode word segmentation, case and accent folding, stop words and a
Snowball stemmer per language (PyStemmer), as KbAnalyzer(words="unicode") asks.

Per word, in this order (the order Lucene's language analyzers use): case folding; elisions and possessives
cut at apostrophes; stop word removal and stemming by the language configured for the word's script (a
Latin word by the KB's Latin-script language, a Cyrillic one by its Cyrillic-script language, …); then
accent folding, so that "Müller", "MÜLLER" and "muller" meet as one term. Scripts written without spaces
(Thai, Lao, Myanmar, Khmer) have no word boundaries that Unicode can find without a dictionary: their runs
become overlapping bigrams of grapheme clusters, the way character bigrams serve Japanese. Korean words
(eojeol: a noun with its particle, 학교에서) are kept whole and also give syllable bigrams as extra terms, so
that 학교 finds 학교에서."""

from __future__ import annotations

import functools
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources

import regex
import Stemmer

from ragkb_analyzer.scripts import Script, word_script
from ragkb_core.kb_settings import LANGUAGE_SCRIPTS, StemLanguage

# Bigram terms (Japanese, Korean, Thai…) share the 32-bit term-id space with words; the prefix keeps the bigram
# 日本 apart from the word 日本. A control character never survives into a word term (Sudachi files it under
# 補助記号/空白, and neither word pattern matches it).
BIGRAM_PREFIX = "\x02"

# Unicode default word boundaries (UAX #29): the `regex` module's WORD flag; V1 for full Unicode properties.
_WORD = regex.compile(r"(?wV1)\b\w.*?\b")
_UNSPACED_RUN = regex.compile(r"[\p{Thai}\p{Lao}\p{Myanmar}\p{Khmer}]+")
_GRAPHEME = regex.compile(r"\X")
# A.B.C. written as an acronym: single letters between dots ("u.s.a" → "usa").
_ACRONYM = regex.compile(r"(?:\w\.)+\w?")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\uff07": "'"})
# Letters that carry their accent in the letter itself (no decomposition), folded as Lucene's ASCIIFoldingFilter.
_LETTER_FOLDS = str.maketrans({"ø": "o", "æ": "ae", "œ": "oe", "ł": "l", "đ": "d", "ð": "d", "þ": "th", "ı": "i"})
# Combining marks removed by accent folding: Latin/Greek/Cyrillic diacritics, Hebrew points, Arabic harakat and
# tatweel. Marks of Indic and Southeast Asian scripts are vowels, not accents, and stay.
_FOLDED_MARKS = regex.compile(
    r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
    r"\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed\u0640]"
)


# Distinct words whose terms an analyzer keeps (a few tens of MB at most).
_KNOWN_WORDS = 200_000


@dataclass
class WordTerms:
    """Terms of one text: `words` count towards its BM25 length, `extras` (Korean bigrams) do not."""

    words: list[str] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)


class WordAnalyzer:
    """The word pipeline for a set of languages (at most one per script). Safe to share between threads: each
    thread gets its own stemmers (PyStemmer's are not thread-safe)."""

    def __init__(self, languages: Iterable[StemLanguage], stop_words: bool) -> None:
        self._languages: dict[Script, StemLanguage] = {LANGUAGE_SCRIPTS[lang]: lang for lang in languages}  # type: ignore[misc]
        self._stop_words: dict[Script, frozenset[str]] = (
            {script: stop_words_of(lang) for script, lang in self._languages.items()} if stop_words else {}
        )
        self._local = threading.local()
        # Terms per word seen (words repeat: a corpus's first few thousand distinct words are most of its text).
        self._known: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}

    def analyze(self, text: str, into: WordTerms) -> None:
        text = text.casefold().translate(_APOSTROPHES)
        position = 0
        for run in _UNSPACED_RUN.finditer(text):
            self._spaced(text[position : run.start()], into)
            into.words.extend(_bigrams(_GRAPHEME.findall(run.group())))
            position = run.end()
        self._spaced(text[position:], into)

    def _spaced(self, text: str, into: WordTerms) -> None:
        for token in _WORD.findall(text):
            for word in _split_apostrophes(token):
                if (known := self._known.get(word)) is None:
                    known = self._word(word)
                    if len(self._known) < _KNOWN_WORDS:
                        self._known[word] = known
                into.words.extend(known[0])
                into.extras.extend(known[1])

    def _word(self, word: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(word terms, extra terms) of one word."""
        script = word_script(word)
        if word in self._stop_words.get(script, ()):
            return (), ()
        if script == "hangul":
            return (word,), tuple(_bigrams(list(word)))
        if (language := self._languages.get(script)) is not None:
            word = self._stemmer(language).stemWord(word)
        return (fold_accents(word),), ()

    def _stemmer(self, language: StemLanguage) -> Stemmer.Stemmer:
        stemmers: dict[str, Stemmer.Stemmer] | None = getattr(self._local, "stemmers", None)
        if stemmers is None:
            stemmers = self._local.stemmers = {}
        if (stemmer := stemmers.get(language)) is None:
            stemmer = stemmers[language] = Stemmer.Stemmer(language)
        return stemmer


def _split_apostrophes(token: str) -> list[str]:
    """Elisions and possessives (l'homme, Müller's, don't) lose the one-letter part beside the apostrophe;
    an acronym written with dots (U.S.A.) loses its dots."""
    if _ACRONYM.fullmatch(token):
        return [token.replace(".", "")]
    if "'" not in token:
        return [token]
    return [part for part in token.split("'") if len(part) > 1]


def _bigrams(units: list[str]) -> list[str]:
    """Overlapping bigrams of a run's characters or grapheme clusters; a run of one gives itself."""
    if len(units) == 1:
        return [BIGRAM_PREFIX + units[0]]
    return [BIGRAM_PREFIX + units[i] + units[i + 1] for i in range(len(units) - 1)]


def fold_accents(word: str) -> str:
    """café → cafe, Müller → muller, Ελληνικά → ελληνικα, ø → o; Indic vowel signs are kept."""
    decomposed = unicodedata.normalize("NFD", word.translate(_LETTER_FOLDS))
    return unicodedata.normalize("NFC", _FOLDED_MARKS.sub("", decomposed))


@functools.cache
def stop_words_of(language: StemLanguage) -> frozenset[str]:
    """The language's stop words, case-folded as words are (none for a language without a list)."""
    path = resources.files("ragkb_analyzer") / "stopwords" / f"{language}.txt"
    if not path.is_file():
        return frozenset()
    lines = path.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip().casefold() for line in lines if line.strip() and not line.startswith("#"))
