"""Japanese via SudachiPy (split mode C, normalized forms), Latin script as lower-cased words."""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata
from collections.abc import Iterator

from sudachipy import Dictionary, SplitMode, Tokenizer

# Stamped on every indexed chunk; bump whenever the terms a text produces change (requires a re-index).
ANALYZER_VERSION = "sudachi-c-norm+latin-lower/1"

# Sudachi refuses inputs over ~49 KB; analyse long texts in pieces cut at line ends below this.
_MAX_SUDACHI_BYTES = 40_000
# Parts of speech that carry no searchable meaning: symbols, punctuation, whitespace.
_SKIPPED_POS = frozenset({"補助記号", "空白"})
_LATIN_WORD = re.compile(r"[0-9a-z]+(?:[._'][0-9a-z]+)*")
_HAS_JAPANESE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3005\u30fc]")


def term_id(term: str) -> int:
    """Stable 32-bit id of a term: the same on every machine and in every process (unlike hash())."""
    return int.from_bytes(hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest(), "little")


class Analyzer:
    """Turns text into index terms. Safe to share between threads (one Sudachi tokenizer per thread)."""

    version = ANALYZER_VERSION

    def __init__(self) -> None:
        self._dictionary = Dictionary(dict="core")
        self._local = threading.local()

    def terms(self, text: str) -> list[str]:
        normalized = unicodedata.normalize("NFKC", text).lower()
        return [term for piece in _pieces(normalized) for term in self._piece_terms(piece)]

    def _piece_terms(self, piece: str) -> Iterator[str]:
        if not _HAS_JAPANESE.search(piece):
            yield from _LATIN_WORD.findall(piece)
            return
        for morpheme in self._tokenizer().tokenize(piece):
            if morpheme.part_of_speech()[0] in _SKIPPED_POS:
                continue
            surface = morpheme.surface()
            if _HAS_JAPANESE.search(surface):
                yield morpheme.normalized_form()
            else:
                yield from _LATIN_WORD.findall(surface)

    def _tokenizer(self) -> Tokenizer:
        tokenizer: Tokenizer | None = getattr(self._local, "tokenizer", None)
        if tokenizer is None:
            tokenizer = self._dictionary.tokenizer(mode=SplitMode.C)
            self._local.tokenizer = tokenizer
        return tokenizer


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
