"""Japanese regulations (就業規則, 規程, statutes): one article (第N条) is one section.

Articles sit under chapters (第N章) and sections (第N節); their markers open a line, with arabic, full-width
or kanji numerals (第12条, 第１２条, 第十二条), branch numbers (第5条の2), and the article's title in brackets
on the same line (第1条（目的）) or on the line before (（目的）\\n第1条 …). A reference inside a sentence
(第5条の規定により…) is not followed by a space or a bracket, so it never opens a section.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from ragkb_worker.parsers.model import Section

_NUMERAL = r"[0-9０-９一二三四五六七八九十百千〇零]+"
_BRACKETS = "（(【「"
_MARKER = re.compile(
    rf"^[ \t\u3000]*(?P<marker>第{_NUMERAL}(?P<unit>章|節|条)(?:の{_NUMERAL})*)"
    rf"(?:(?P<title>[{_BRACKETS}][^）)】」\n]{{1,40}}[）)】」])|(?=[ \t\u3000]|$))(?P<rest>[^\n]*)",
    re.MULTILINE,
)
# A title alone on the line above an article (blank lines between allowed): （目的）
_TITLE_LINE = re.compile(r"[ \t\u3000]*[（(【][^）)】\n]{1,40}[）)】][ \t\u3000]*\n\s*\Z")
_LEVELS = {"章": 0, "節": 1, "条": 2}
# Fewer articles than this and the text is not a regulation, only a text that mentions one.
_MIN_ARTICLES = 2


@dataclass(frozen=True)
class Marker:
    line: int  # where the marker's line starts
    start: int  # where its section starts: the title line above, when there is one
    level: int
    heading: str


def split_regulations(text: str, sections: list[Section], *, flowing: bool = False) -> list[Section]:
    """Cut each section at the chapter, section and article markers inside it.

    The markers' headings extend the section's heading path. `flowing`: the sections are consecutive
    pages of one text, so an article that runs over a page break keeps its heading on the next page.
    """
    markers = find_markers(text)
    if sum(1 for m in markers if m.level == _LEVELS["条"]) < _MIN_ARTICLES:
        return sections
    result: list[Section] = []
    open_headings: dict[int, str] = {}
    for section in sections:
        if not flowing:
            open_headings = {}
        if section.kind == "prose":  # a table or code keeps its own structure
            result.extend(_split_section(section, markers, open_headings))
        else:
            result.append(section)
    return [s for s in result if text[s.start : s.end].strip()]


def find_markers(text: str) -> list[Marker]:
    return [_marker(text, match) for match in _MARKER.finditer(text)]


def _marker(text: str, match: re.Match[str]) -> Marker:
    level = _LEVELS[match["unit"]]
    start = line = match.start()
    title = match["title"] or ""
    above = _line_above(text, line)
    if above is not None and level == _LEVELS["条"]:
        start -= len(above)
        title = title or above.strip()
    if level == _LEVELS["条"]:
        heading = match["marker"] + title
    else:  # a chapter's or section's name follows its marker: 第1章 総則
        heading = " ".join((match["marker"] + title + match["rest"]).split())
    return Marker(line, start, level, heading)


def _line_above(text: str, start: int) -> str | None:
    """The bracketed title line just above `start` (with the blank lines after it), if there is one."""
    filled_end = start
    while filled_end > 0 and text[filled_end - 1].isspace():
        filled_end -= 1
    line_start = text.rfind("\n", 0, filled_end) + 1
    candidate = text[line_start:start]
    return candidate if filled_end and _TITLE_LINE.fullmatch(candidate) else None


def _split_section(section: Section, markers: list[Marker], open_headings: dict[int, str]) -> Iterator[Section]:
    """Yield the section's pieces; `open_headings` (level → heading) is updated as markers pass."""
    position = section.start
    first = bisect.bisect_left(markers, section.start, key=lambda m: m.line)
    last = bisect.bisect_left(markers, section.end, key=lambda m: m.line)
    for marker in markers[first:last]:
        start = max(marker.start, position)
        if start > position:
            yield _piece(section, position, start, open_headings)
        for level in [lvl for lvl in open_headings if lvl >= marker.level]:
            del open_headings[level]
        open_headings[marker.level] = marker.heading
        position = start
    yield _piece(section, position, section.end, open_headings)


def _piece(section: Section, start: int, end: int, open_headings: dict[int, str]) -> Section:
    path = section.heading_path + tuple(open_headings[level] for level in sorted(open_headings))
    return replace(section, heading_path=path, start=start, end=end)
