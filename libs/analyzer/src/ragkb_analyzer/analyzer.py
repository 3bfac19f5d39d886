"""Japanese via SudachiPy (split mode C, normalized forms) or character bigrams; optionally extra Japanese
terms for recall (mode A sub-words of compounds, character bigrams); the words of every other script by
ragkb_analyzer.words (version 2), or, for KBs built before it, Latin a-z/0-9 runs lower-cased (version 1).

Which of these a KB uses is its ragkb_core.kb_settings.KbAnalyzer, fixed until the KB is re-indexed. A text
is cut into pieces at line ends; a piece with Japanese in it goes to Sudachi whole (its context helps), and
the stretches between its Japanese morphemes go to the word analyzer, so that a Latin or Korean word gives
the same terms inside Japanese text as outside it."""

from __future__ import annotations

import functools
import hashlib
import re
import threading
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from sudachipy import Dictionary, Morpheme, SplitMode, Tokenizer

from ragkb_analyzer.words import BIGRAM_PREFIX, WordAnalyzer, WordTerms
from ragkb_core.kb_settings import KbAnalyzer

# Stamped on every chunk indexed by Sudachi alone (KbAnalyzer(char_bigrams=False).version): indexes built
# before the analyzer was a per-KB setting carry it, so it must not change.
ANALYZER_VERSION = "sudachi-c-norm+latin-lower/1"

# Sudachi refuses inputs over ~49 KB; analyse long texts in pieces cut at line ends below this.
_MAX_SUDACHI_BYTES = 40_000
# Parts of speech that carry no searchable meaning: symbols, punctuation, whitespace.
_SKIPPED_POS = frozenset({"補助記号", "空白"})
_LATIN_WORD = re.compile(r"[0-9a-z]+(?:[._'][0-9a-z]+)*")
_HAS_JAPANESE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u30fc]")
# Runs that character bigrams are taken from: kana, kanji, 々 and ー, but not the middle dot ・ (a separator).
_JAPANESE_RUN = re.compile(r"[\u3040-\u309f\u30a0-\u30fa\u30fc-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005]+")
_dictionary_lock = threading.Lock()


def term_id(term: str) -> int:
    """Stable 32-bit id of a term: the same on every machine and in every process (unlike hash())."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest(), "little")


@dataclass(frozen=True)
class Analysis:
    """The terms of a text, and its length for BM25: the number of its word terms (Sudachi words or, for
    the bigram analyzer, bigrams; Latin words), so that extra recall terms do not make a text look longer."""

    terms: list[str]
    length: int


class Analyzer:
    """Turns text into index terms. Safe to share between threads (one Sudachi tokenizer per thread)."""

    def __init__(self, config: KbAnalyzer | None = None) -> None:
        self.config = config or KbAnalyzer()
        self.version = self.config.version
        self._local = threading.local()
        self._words = (
            WordAnalyzer(self.config.languages, self.config.stop_words) if self.config.words == "unicode" else None
        )

    def terms(self, text: str) -> list[str]:
        return self.analyze(text).terms

    def analyze(self, text: str) -> Analysis:
        normalized = unicodedata.normalize("NFKC", text).lower()
        terms = WordTerms()
        for piece in _pieces(normalized):
            self._analyze_piece(piece, terms)
        return Analysis(terms=terms.words + terms.extras, length=len(terms.words))

    def _analyze_piece(self, piece: str, terms: WordTerms) -> None:
        if not _HAS_JAPANESE.search(piece):
            self._other_words(piece, terms)
        elif self.config.japanese == "char-bigram":
            self._bigram_terms(piece, terms)
        else:
            self._sudachi_terms(piece, terms)
            if self.config.char_bigrams:
                terms.extras.extend(bigram for run in _JAPANESE_RUN.findall(piece) for bigram in _bigrams(run))

    def _other_words(self, text: str, terms: WordTerms) -> None:
        """Everything but Japanese: the word analyzer (version 2), or a-z/0-9 runs (version 1)."""
        if self._words is None:
            terms.words.extend(_LATIN_WORD.findall(text))
        else:
            self._words.analyze(text, terms)

    def _bigram_terms(self, piece: str, terms: WordTerms) -> None:
        """The plain baseline: bigrams of each Japanese run, the other words between the runs."""
        position = 0
        for run in _JAPANESE_RUN.finditer(piece):
            self._other_words(piece[position : run.start()], terms)
            terms.words.extend(_bigrams(run.group()))
            position = run.end()
        self._other_words(piece[position:], terms)

    def _sudachi_terms(self, piece: str, terms: WordTerms) -> None:
        if self._words is None:
            self._sudachi_terms_v1(piece, terms)
        else:
            self._sudachi_terms_v2(piece, terms, self._words)

    def _sudachi_terms_v2(self, piece: str, terms: WordTerms, words: WordAnalyzer) -> None:
        # Consecutive morphemes without Japanese (Latin words, numbers, Hangul, punctuation, spaces) are one
        # stretch of the piece, analysed as words: Sudachi's cuts inside them (don / ' / t) do not matter.
        stretch: tuple[int, int] | None = None
        for morpheme in self._tokenizer().tokenize(piece):
            if not _HAS_JAPANESE.search(morpheme.surface()):
                stretch = (stretch[0] if stretch else morpheme.begin(), morpheme.end())
                continue
            if stretch is not None:
                words.analyze(piece[stretch[0] : stretch[1]], terms)
                stretch = None
            if morpheme.part_of_speech()[0] not in _SKIPPED_POS:
                terms.words.append(morpheme.normalized_form())
                if self.config.sudachi_mode_a_subwords:
                    terms.extras.extend(self._subword_terms(morpheme))
        if stretch is not None:
            words.analyze(piece[stretch[0] : stretch[1]], terms)

    def _subword_terms(self, morpheme: Morpheme) -> list[str]:
        """Normalized forms of the mode A parts of a compound (選挙管理委員会 → 選挙, 管理, 委員, 会)."""
        parts = morpheme.split(SplitMode.A)
        if len(parts) < 2:
            return []
        kept = [part for part in parts if part.part_of_speech()[0] not in _SKIPPED_POS]
        if self._words is None:
            return [term for part in kept for term in _morpheme_terms_v1(part)]
        found = WordTerms()
        for part in kept:
            if _HAS_JAPANESE.search(part.surface()):
                found.words.append(part.normalized_form())
            else:
                self._words.analyze(part.surface(), found)
        return found.words + found.extras

    def _sudachi_terms_v1(self, piece: str, terms: WordTerms) -> None:
        """Version 1, kept term for term for the indexes built with it: Latin runs of each morpheme alone."""
        for morpheme in self._tokenizer().tokenize(piece):
            if morpheme.part_of_speech()[0] in _SKIPPED_POS:
                continue
            terms.words.extend(_morpheme_terms_v1(morpheme))
            if self.config.sudachi_mode_a_subwords:
                terms.extras.extend(self._subword_terms(morpheme))

    def _tokenizer(self) -> Tokenizer:
        tokenizer: Tokenizer | None = getattr(self._local, "tokenizer", None)
        if tokenizer is None:
            tokenizer = shared_dictionary().tokenizer(mode=SplitMode.C)
            self._local.tokenizer = tokenizer
        return tokenizer


def shared_dictionary() -> Dictionary:
    """The Sudachi dictionary, loaded once per process (it is large) and shared by every analyzer."""
    # The lock makes concurrent first calls wait for one load instead of each loading a copy.
    with _dictionary_lock:
        return _load_dictionary()


@functools.cache
def _load_dictionary() -> Dictionary:
    return Dictionary(dict="core")


def _morpheme_terms_v1(morpheme: Morpheme) -> list[str]:
    surface = morpheme.surface()
    if _HAS_JAPANESE.search(surface):
        return [morpheme.normalized_form()]
    return _LATIN_WORD.findall(surface)


def _bigrams(run: str) -> list[str]:
    """Overlapping character bigrams of a run (東京都 → 東京, 京都); a one-character run gives itself."""
    if len(run) == 1:
        return [BIGRAM_PREFIX + run]
    return [BIGRAM_PREFIX + run[i : i + 2] for i in range(len(run) - 1)]


def _pieces(text: str) -> Iterator[str]:
    """Cut text at line ends into pieces Sudachi accepts; a single over-long line is cut hard."""
    buffer: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        line_size = len(line.encode("utf-8"))
        if size + line_size > _MAX_SUDACHI_BYTES and buffer:
            yield "".join(buffer)
            buffer, size = [], 0
        if line_size > _MAX_SUDACHI_BYTES:
            yield from _hard_cut(line)
            continue
        buffer.append(line)
        size += line_size
    if buffer:
        yield "".join(buffer)


def _hard_cut(line: str) -> Iterator[str]:
    # Characters are at most 4 bytes in UTF-8, so this many characters always fit.
    step = _MAX_SUDACHI_BYTES // 4
    for start in range(0, len(line), step):
        yield line[start : start + step]
