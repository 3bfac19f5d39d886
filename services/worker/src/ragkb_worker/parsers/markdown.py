"""Markdown: ATX headings (outside code fences) give the heading path; pipe tables keep their header row."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace

from ragkb_worker.parsers.model import ParsedDocument, ParseOptions, Section
from ragkb_worker.parsers.regulations import split_regulations
from ragkb_worker.parsers.text import decode_text

_ATX_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~)", re.MULTILINE)
_LINE = re.compile(r"[^\n]*\n?")
# The row under a table's header: | --- | :---: | (outer bars optional, at least one bar or two cells).
_TABLE_DELIMITER = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")


def parse_markdown(data: bytes, options: ParseOptions) -> ParsedDocument:
    text = decode_text(data)
    sections = [piece for section in markdown_sections(text) for piece in _split_tables(text, section)]
    return ParsedDocument(text=text, sections=split_regulations(text, sections))


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


def _split_tables(text: str, section: Section) -> Iterator[Section]:
    """The section's prose and tables as separate sections; a table's header is its first two lines."""
    position = section.start
    for start, header_end, end in _tables(text, section.start, section.end):
        if text[position:start].strip():
            yield replace(section, start=position, end=start)
        header = text[start:header_end].rstrip("\n")
        yield replace(section, start=start, end=end, kind="table", header=header)
        position = end
    if text[position : section.end].strip():
        yield replace(section, start=position, end=section.end)


def _tables(text: str, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(start, end of the header and delimiter rows, end) of each pipe table in text[start:end]."""
    lines = [(m.start(), m.end()) for m in _LINE.finditer(text, start, end) if m.end() > m.start()]
    index = 0
    while index < len(lines) - 1:
        head, delimiter = (text[a:b].rstrip("\n") for a, b in lines[index : index + 2])
        if "|" not in head or "|" not in delimiter or not _TABLE_DELIMITER.match(delimiter):
            index += 1
            continue
        last = index + 2
        while last < len(lines) and "|" in text[lines[last][0] : lines[last][1]].strip():
            last += 1
        yield lines[index][0], lines[index + 1][1], lines[last - 1][1]
        index = last
