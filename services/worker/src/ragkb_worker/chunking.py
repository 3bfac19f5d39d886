"""Token-bounded, structure-aware chunking. Chunk text is a verbatim slice of the document text, with one
exception: a section's repeated header (a table's header row) is put before every chunk of that section
after the first, so that each chunk of a table still names its columns.

Each section is cut into units by its kind — prose: paragraphs, a paragraph over the target into sentences;
code: blank-line blocks, then lines; table: rows — a unit over the target into token windows; units are
then packed greedily up to the target. A chunk never crosses a section boundary, never exceeds
`max_tokens`, and (except in tables, whose rows stand alone) carries trailing units of up to
`overlap_tokens` into the next. Chunks with no content, or holding only their section's heading, are
dropped and counted by reason in the `ChunkReport`.
"""

from __future__ import annotations

import bisect
import itertools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from ragkb_core.errors import PayloadTooLarge
from ragkb_core.kb_settings import KbChunking
from ragkb_core.settings import LimitSettings
from ragkb_worker.parsing import ParsedDocument, Section

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
# Sentence ends: Japanese full stops (no space follows them) and Latin ones followed by a space, or a newline.
_SENTENCE_END = re.compile(r"(?<=[。！？!?])|(?<=[.;:])(?=\s)|\n")
_LINE_BREAK = re.compile(r"\n")
_LINE = re.compile(r"[^\n]*\n?")
# Unicode categories that do not make a heading differ: punctuation, symbols, separators, controls.
_IGNORED_IN_HEADINGS = frozenset("PSZC")

# Reasons a chunk is dropped, as counted in ChunkReport.dropped.
EMPTY = "empty"
HEADING_ONLY = "heading_only"
NOISE = "noise"


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
    # Reason → count: EMPTY and HEADING_ONLY count chunks, NOISE counts the lines removed before chunking.
    dropped: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class _Plan:
    """How one section is packed: the header repeated on chunks after the first, and the overlap."""

    header: str | None
    header_tokens: int
    overlap: int


class Chunker:
    def __init__(self, tokenizer: Tokenizer, settings: KbChunking, limits: LimitSettings | None = None) -> None:
        self._tokenizer = tokenizer
        self._target = min(settings.target_tokens, settings.max_tokens)
        self._max = settings.max_tokens
        self._overlap = min(settings.overlap_tokens, self._target // 2)
        self._max_chunks = (limits or LimitSettings()).max_chunks

    def chunk(
        self, document: ParsedDocument, noise_patterns: Sequence[re.Pattern[str]] = ()
    ) -> tuple[list[Chunk], ChunkReport]:
        """Chunk the document; lines matching any of `noise_patterns` (searched, not matched from the start)
        are removed first, and chunk offsets then refer to the text without them."""
        report = ChunkReport()
        document, noise_lines = remove_noise_lines(document, noise_patterns)
        if noise_lines:
            report.dropped[NOISE] = noise_lines
        chunks: list[Chunk] = []
        for section in document.sections:
            for chunk in self._section_chunks(document.text, section, report):
                chunks.append(chunk)
                self._check_count(len(chunks))
        report.chunks = len(chunks)
        return chunks, report

    def _section_chunks(self, text: str, section: Section, report: ChunkReport) -> Iterator[Chunk]:
        plan = self._plan(section)
        units = self._units(text, section, self._target - plan.header_tokens)
        for index, (start, end, body_tokens) in enumerate(self._pack(units, plan)):
            body = text[start:end]
            reason = drop_reason(body, section.heading_path)
            if reason is not None:
                report.dropped[reason] += 1
                continue
            chunk_text, tokens = body, body_tokens
            if plan.header is not None and index > 0:
                # The one place where chunk text is not a verbatim slice: the table's header row goes first.
                chunk_text, tokens = f"{plan.header}\n{body}", body_tokens + plan.header_tokens
            yield Chunk(chunk_text, section.heading_path, section.page, start, end, tokens)

    def _plan(self, section: Section) -> _Plan:
        # Rows of a table stand alone: overlapping them would only repeat records.
        overlap = 0 if section.kind == "table" else self._overlap
        header = section.header.strip() if section.header else None
        header_tokens = self._count(header) if header else 0
        # A header that would take more than half of every chunk is not repeated: the rows matter more.
        if header is None or header_tokens > self._target // 2:
            return _Plan(None, 0, overlap)
        return _Plan(header, header_tokens, overlap)

    def _units(self, text: str, section: Section, budget: int) -> list[Span]:
        if section.kind == "table":
            return self._fit_all(text, _split(text, section.start, section.end, _LINE_BREAK), budget, None)
        inner = _LINE_BREAK if section.kind == "code" else _SENTENCE_END
        return self._fit_all(text, _split(text, section.start, section.end, _PARAGRAPH_BREAK), budget, inner)

    def _fit_all(
        self, text: str, spans: list[tuple[int, int]], budget: int, inner: re.Pattern[str] | None
    ) -> list[Span]:
        units: list[Span] = []
        for start, end in spans:
            units.extend(self._fit(text, start, end, budget, inner))
        return units

    def _fit(self, text: str, start: int, end: int, budget: int, inner: re.Pattern[str] | None) -> list[Span]:
        """One block as units no larger than the budget: itself, its inner pieces (sentences, lines), or
        token windows."""
        tokens = self._count(text[start:end])
        if tokens <= budget:
            return [Span(start, end, tokens)]
        if inner is None:
            return self._windows(text, start, end, budget)
        return self._fit_all(text, _split(text, start, end, inner), budget, None)

    def _windows(self, text: str, start: int, end: int, budget: int) -> list[Span]:
        """Cut an over-long piece at token boundaries into budget-sized windows."""
        offsets = self._tokenizer.token_offsets(text[start:end])
        windows: list[Span] = []
        for first in range(0, len(offsets), budget):
            last = min(first + budget, len(offsets)) - 1
            w_start = start + (offsets[first][0] if first else 0)
            w_end = start + offsets[last][1] if last < len(offsets) - 1 else end
            windows.append(Span(w_start, w_end, last - first + 1))
        return windows

    def _pack(self, units: list[Span], plan: _Plan) -> list[tuple[int, int, int]]:
        """Pack units up to the target; chunks after the first leave room for the repeated header."""
        packed: list[tuple[int, int, int]] = []
        current: list[Span] = []
        for unit in units:
            budget = self._target - (plan.header_tokens if packed else 0)
            if current and sum(u.tokens for u in current) + unit.tokens > budget:
                packed.append(_join(current))
                current = self._overlap_tail(current, unit, plan)
            current.append(unit)
        if current:
            packed.append(_join(current))
        return packed

    def _overlap_tail(self, previous: list[Span], following: Span, plan: _Plan) -> list[Span]:
        """Trailing units of the previous chunk, within the overlap and leaving room for the next unit."""
        tail: list[Span] = []
        room = min(plan.overlap, self._max - plan.header_tokens - following.tokens)
        for unit in reversed(previous):
            if unit.tokens > room:
                break
            tail.insert(0, unit)
            room -= unit.tokens
        return tail if len(tail) < len(previous) else []

    def _count(self, text: str) -> int:
        return len(self._tokenizer.token_offsets(text))

    def _check_count(self, count: int) -> None:
        if count > self._max_chunks:
            raise PayloadTooLarge(
                f"the document would be cut into more than {self._max_chunks} chunks "
                "(RAGKB_LIMITS__MAX_CHUNKS); split it into smaller documents"
            )


def drop_reason(text: str, heading_path: tuple[str, ...]) -> str | None:
    """Why a chunk is not worth indexing: EMPTY (no letter or digit), HEADING_ONLY (it only repeats its
    heading), or None when it is."""
    if not _has_content(text):
        return EMPTY
    bare = _bare(text)
    if heading_path and (bare == _bare("".join(heading_path)) or any(bare == _bare(h) for h in heading_path)):
        return HEADING_ONLY
    return None


def remove_noise_lines(document: ParsedDocument, patterns: Sequence[re.Pattern[str]]) -> tuple[ParsedDocument, int]:
    """The document without the lines any pattern finds something in, its sections moved to match, and how
    many lines were removed."""
    if not patterns:
        return document, 0
    removed: list[tuple[int, int]] = []  # spans of the removed lines, their line break included
    for line in _LINE.finditer(document.text):
        if line.end() > line.start() and any(p.search(line.group().rstrip("\n")) for p in patterns):
            removed.append((line.start(), line.end()))
    if not removed:
        return document, 0
    shift = _OffsetShift(removed)
    text = "".join(document.text[a:b] for a, b in _kept_spans(removed, len(document.text)))
    sections = [replace(s, start=shift(s.start), end=shift(s.end)) for s in document.sections]
    return ParsedDocument(text, [s for s in sections if text[s.start : s.end].strip()]), len(removed)


class _OffsetShift:
    """Maps an offset in the original text to the text with the removed spans (sorted, disjoint) cut out."""

    def __init__(self, removed: list[tuple[int, int]]) -> None:
        self._starts = [start for start, _ in removed]
        self._ends = [end for _, end in removed]
        self._removed_before = list(itertools.accumulate((end - start for start, end in removed), initial=0))

    def __call__(self, offset: int) -> int:
        count = bisect.bisect_left(self._starts, offset)  # spans that start before the offset
        if not count:
            return offset
        # All of them lie wholly before it, but the last may reach past it.
        overhang = max(0, self._ends[count - 1] - offset)
        return offset - (self._removed_before[count] - overhang)


def _kept_spans(removed: list[tuple[int, int]], length: int) -> Iterator[tuple[int, int]]:
    position = 0
    for start, end in removed:
        yield position, start
        position = end
    yield position, length


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


def _bare(text: str) -> str:
    """Text reduced for comparison: NFKC (full/half width), case folded, without punctuation and spaces."""
    normal = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in normal if unicodedata.category(c)[0] not in _IGNORED_IN_HEADINGS)
