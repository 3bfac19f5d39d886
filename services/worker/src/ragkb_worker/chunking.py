"""Token-bounded, heading-aware chunking. Chunk text is a verbatim slice of the document text.

Each section is cut into units (paragraphs; a paragraph over the target into sentences; a sentence over the
target into token windows), and units are packed greedily up to the target. A chunk never crosses a section
boundary, never exceeds `max_tokens`, and carries trailing units of up to `overlap_tokens` into the next.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from ragkb_core.settings import ChunkingSettings
from ragkb_worker.parsing import ParsedDocument, Section

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
# Sentence ends: Japanese full stops (no space follows them) and Latin ones followed by a space, or a newline.
_SENTENCE_END = re.compile(r"(?<=[。！？!?])|(?<=[.;:])(?=\s)|\n")


class Tokenizer(Protocol):
    def token_offsets(self, text: str) -> list[tuple[int, int]]: ...


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    tokens: int


@dataclass(frozen=True)
class Chunk:
    text: str
    heading_path: tuple[str, ...]
    page: int | None
    char_start: int
    char_end: int
    tokens: int


@dataclass
class ChunkReport:
    chunks: int = 0
    dropped: Counter[str] = field(default_factory=Counter)


class Chunker:
    def __init__(self, tokenizer: Tokenizer, settings: ChunkingSettings) -> None:
        self._tokenizer = tokenizer
        self._target = min(settings.target_tokens, settings.max_tokens)
        self._max = settings.max_tokens
        self._overlap = min(settings.overlap_tokens, self._target // 2)

    def chunk(self, document: ParsedDocument) -> tuple[list[Chunk], ChunkReport]:
        report = ChunkReport()
        chunks: list[Chunk] = []
        for section in document.sections:
            for start, end, tokens in self._pack(self._units(document.text, section)):
                text = document.text[start:end]
                if not _has_content(text):
                    report.dropped["empty"] += 1
                    continue
                chunks.append(Chunk(text, section.heading_path, section.page, start, end, tokens))
        report.chunks = len(chunks)
        return chunks, report

    def _units(self, text: str, section: Section) -> list[Span]:
        units: list[Span] = []
        for start, end in _split(text, section.start, section.end, _PARAGRAPH_BREAK):
            units.extend(self._fit(text, start, end))
        return units

    def _fit(self, text: str, start: int, end: int) -> list[Span]:
        """One paragraph as units no larger than the target: itself, its sentences, or token windows."""
        tokens = self._count(text[start:end])
        if tokens <= self._target:
            return [Span(start, end, tokens)]
        units: list[Span] = []
        for s_start, s_end in _split(text, start, end, _SENTENCE_END):
            sentence_tokens = self._count(text[s_start:s_end])
            if sentence_tokens <= self._target:
                units.append(Span(s_start, s_end, sentence_tokens))
            else:
                units.extend(self._windows(text, s_start, s_end))
        return units

    def _windows(self, text: str, start: int, end: int) -> list[Span]:
        """Cut an over-long sentence at token boundaries into target-sized windows."""
        offsets = self._tokenizer.token_offsets(text[start:end])
        windows: list[Span] = []
        for first in range(0, len(offsets), self._target):
            last = min(first + self._target, len(offsets)) - 1
            w_start = start + (offsets[first][0] if first else 0)
            w_end = start + offsets[last][1] if last < len(offsets) - 1 else end
            windows.append(Span(w_start, w_end, last - first + 1))
        return windows

    def _pack(self, units: list[Span]) -> list[tuple[int, int, int]]:
        packed: list[tuple[int, int, int]] = []
        current: list[Span] = []
        for unit in units:
            if current and sum(u.tokens for u in current) + unit.tokens > self._target:
                packed.append(_join(current))
                current = self._overlap_tail(current, unit)
            current.append(unit)
        if current:
            packed.append(_join(current))
        return packed

    def _overlap_tail(self, previous: list[Span], following: Span) -> list[Span]:
        """Trailing units of the previous chunk, within the overlap and leaving room for the next unit."""
        tail: list[Span] = []
        budget = min(self._overlap, self._max - following.tokens)
        for unit in reversed(previous):
            if unit.tokens > budget:
                break
            tail.insert(0, unit)
            budget -= unit.tokens
        return tail if len(tail) < len(previous) else []

    def _count(self, text: str) -> int:
        return len(self._tokenizer.token_offsets(text))


def _split(text: str, start: int, end: int, separator: re.Pattern[str]) -> list[tuple[int, int]]:
    """Spans of text[start:end] between separators, trimmed of surrounding whitespace, empty ones left out."""
    spans: list[tuple[int, int]] = []
    position = start
    for match in separator.finditer(text, start, end):
        spans.append((position, match.start()))
        position = match.end()
    spans.append((position, end))
    return [trimmed for span in spans if (trimmed := _trim(text, *span))]


def _trim(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _join(units: list[Span]) -> tuple[int, int, int]:
    return units[0].start, units[-1].end, sum(u.tokens for u in units)


def _has_content(text: str) -> bool:
    """True when text holds a letter or digit after normalising full/half width: symbols alone are noise."""
    return any(unicodedata.category(c)[0] in "LN" for c in unicodedata.normalize("NFKC", text))
