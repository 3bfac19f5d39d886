"""Parsers: bytes of one media type → the document's text and its sections (heading path, page)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from ragkb_core.errors import ParseFailed, UnsupportedMediaType
from ragkb_core.formats import MARKDOWN, PLAIN_TEXT


@dataclass(frozen=True)
class Section:
    """A span [start, end) of the document text under one heading path, on one page."""

    heading_path: tuple[str, ...]
    start: int
    end: int
    page: int | None = None


@dataclass(frozen=True)
class ParsedDocument:
    text: str
    sections: list[Section]


# Encodings tried in order: UTF-8 (with or without BOM) first; Shift_JIS (cp932) is common in Japanese offices.
_ENCODINGS = ("utf-8-sig", "cp932")
# Unicode categories that readable text almost never holds: controls, private use, unassigned, surrogates.
_NOT_TEXT = frozenset({"Cc", "Co", "Cn", "Cs"})
_ATX_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~)", re.MULTILINE)


def decode_text(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return _check_text(_decode(data, "utf-16"))
    for encoding in _ENCODINGS:
        try:
            return _check_text(data.decode(encoding))
        except UnicodeDecodeError:
            continue
    raise ParseFailed("the text is neither UTF-8 nor Shift_JIS: it cannot be decoded")


def _check_text(text: str) -> str:
    """Shift_JIS decodes many binary byte runs into private-use characters: such text is not text."""
    suspicious = sum(1 for c in text if unicodedata.category(c) in _NOT_TEXT and c not in "\t\n\r\f")
    if suspicious > max(2, len(text) // 100):
        raise ParseFailed("the content is not text: it cannot be decoded into readable characters")
    return text


def _decode(data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ParseFailed(f"the text is not valid {encoding}") from exc


def parse_plain_text(data: bytes) -> ParsedDocument:
    text = decode_text(data)
    return ParsedDocument(text=text, sections=[Section(heading_path=(), start=0, end=len(text))])


def parse_markdown(data: bytes) -> ParsedDocument:
    text = decode_text(data)
    return ParsedDocument(text=text, sections=markdown_sections(text))


def markdown_sections(text: str) -> list[Section]:
    """Cut at ATX headings (outside code fences); each section's span starts after its heading line."""
    sections: list[Section] = []
    path: list[tuple[int, str]] = []
    position = 0
    for match in _headings_outside_fences(text):
        if match.start() > position:
            sections.append(Section(tuple(title for _, title in path), position, match.start()))
        level, title = len(match.group(1)), match.group(2).strip()
        path = [(lvl, t) for lvl, t in path if lvl < level] + [(level, title)]
        position = match.end()
    sections.append(Section(tuple(title for _, title in path), position, len(text)))
    return [s for s in sections if text[s.start : s.end].strip()]


def _headings_outside_fences(text: str) -> list[re.Match[str]]:
    fences = [m.start() for m in _FENCE.finditer(text)]
    fenced = list(zip(fences[0::2], [*fences[1::2], len(text)], strict=False))
    return [m for m in _ATX_HEADING.finditer(text) if not any(a <= m.start() < b for a, b in fenced)]


PARSERS: dict[str, Callable[[bytes], ParsedDocument]] = {
    PLAIN_TEXT: parse_plain_text,
    MARKDOWN: parse_markdown,
}


def parse(media_type: str, data: bytes) -> ParsedDocument:
    parser = PARSERS.get(media_type)
    if parser is None:
        raise UnsupportedMediaType(f"no parser for {media_type}")
    document = parser(data)
    if not document.text.strip():
        raise ParseFailed("the document contains no text")
    return document
