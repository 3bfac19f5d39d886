"""Word (.docx): paragraphs and tables in reading order; Title and Heading 1..n styles give the heading path.

word/document.xml is streamed, never built as a tree: text is gathered from parse events and every element is
dropped once read, and reading stops as soon as the text passes the text limit. (python-docx built the whole
tree: a 0.5 MB file whose body was 190 MB of tiny paragraphs cost a worker 3 GB and 54 s.)
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, field

from lxml import etree

from ragkb_core import formats
from ragkb_core.errors import PayloadTooLarge
from ragkb_worker.parsers.archive import check_whole_part, iterparse, parse_whole, read_member, streamed_member
from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.model import ParsedDocument, ParseOptions
from ragkb_worker.parsers.office import MAIN_PARTS, check_office_archive
from ragkb_worker.parsers.regulations import split_regulations

BODY, KIND = MAIN_PARTS[formats.DOCX]
STYLES = "word/styles.xml"
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
_VAL = f"{_W}val"
# Built-in heading styles by their English names (Word stores those whatever the interface language).
_HEADING_STYLE = re.compile(r"^(?:heading|見出し)\s*(\d)$", re.IGNORECASE)
_TITLE_STYLES = frozenset({"title", "表題"})
_TAGS = (
    *(f"{_W}{name}" for name in ("p", "tbl", "tr", "tc", "t", "tab", "br", "cr", "pStyle", "outlineLvl")),
    _MC_FALLBACK,
)


def parse_docx(data: bytes, options: ParseOptions) -> ParsedDocument:
    archive = check_office_archive(data, formats.DOCX, options.limits)
    levels = _heading_levels(archive)
    builder = OutlineBuilder(options.limits.max_text_chars)
    _BodyReader(builder, levels, options.limits.max_text_chars).read(archive)
    parsed = builder.build()
    return ParsedDocument(parsed.text, split_regulations(parsed.text, parsed.sections))


def heading_level(style_name: str | None) -> int | None:
    """0 for the Title style, n for Heading n, None for body text."""
    name = (style_name or "").strip()
    if name.lower() in _TITLE_STYLES:
        return 0
    match = _HEADING_STYLE.match(name)
    return int(match.group(1)) if match else None


def _heading_levels(archive: zipfile.ZipFile) -> dict[str, int]:
    """Paragraph style id → heading level: by the style's name, else its outline level, else its base style's."""
    if STYLES not in archive.namelist():
        return {}
    check_whole_part(archive, STYLES, KIND)
    root = parse_whole(read_member(archive, STYLES, KIND), KIND, STYLES)
    own: dict[str, int | None] = {}
    based_on: dict[str, str] = {}
    for style in root.iter(f"{_W}style"):
        style_id = style.get(f"{_W}styleId")
        if style_id is None or style.get(f"{_W}type") != "paragraph":
            continue
        own[style_id] = heading_level(_child_value(style, "name")) if _child_value(style, "name") else None
        outline = style.find(f"{_W}pPr/{_W}outlineLvl")
        if own[style_id] is None and outline is not None and (outline.get(_VAL) or "").isdigit():
            outline_level = int(outline.get(_VAL) or "9")
            own[style_id] = outline_level + 1 if outline_level < 9 else None
        if (base := _child_value(style, "basedOn")) is not None:
            based_on[style_id] = base
    resolved = {style_id: _resolve(style_id, own, based_on) for style_id in own}
    return {style_id: level for style_id, level in resolved.items() if level is not None}


def _child_value(element: etree._Element, name: str) -> str | None:
    child = element.find(f"{_W}{name}")
    return None if child is None else child.get(_VAL)


def _resolve(style_id: str, own: dict[str, int | None], based_on: dict[str, str]) -> int | None:
    seen: set[str] = set()
    current: str | None = style_id
    while current is not None and current not in seen:
        seen.add(current)
        if own.get(current) is not None:
            return own[current]
        current = based_on.get(current)
    return None


@dataclass
class _Table:
    rows: list[list[str]] = field(default_factory=list)
    row: list[str] = field(default_factory=list)
    cell: list[str] = field(default_factory=list)


class _BodyReader:
    """Body text from parse events. Only top-level paragraphs and tables are blocks; paragraphs inside a
    table cell become lines of the cell; a nested table's text flows into its outer cell; a text box's
    paragraphs are part of the paragraph that anchors them; the fallback copy of alternate content is skipped."""

    def __init__(self, builder: OutlineBuilder, levels: dict[str, int], max_chars: int) -> None:
        self._builder = builder
        self._levels = levels
        self._max_chars = max_chars
        self._read_chars = 0
        self._paragraph_depth = 0
        self._fallback_depth = 0
        self._paragraph: list[str] = []
        self._style: str | None = None
        self._outline: int | None = None
        self._tables: list[_Table] = []

    def read(self, archive: zipfile.ZipFile) -> None:
        with streamed_member(archive, BODY, KIND) as stream:
            for event, element in iterparse(stream, _TAGS, ("start", "end"), max_text_chars=self._max_chars):
                if event == "start":
                    self._start(element.tag)
                else:
                    self._end(element.tag, element.text, element.get(_VAL))

    def _start(self, tag: str) -> None:
        if tag == _MC_FALLBACK:
            self._fallback_depth += 1
        elif tag == f"{_W}p":
            self._paragraph_depth += 1
        elif tag == f"{_W}tbl":
            self._tables.append(_Table())
        elif tag == f"{_W}tr" and len(self._tables) == 1:
            self._tables[0].row = []
        elif tag == f"{_W}tc" and len(self._tables) == 1:
            self._tables[0].cell = []

    def _end(self, tag: str, text: str | None, value: str | None) -> None:
        if tag == _MC_FALLBACK:
            self._fallback_depth -= 1
        elif self._fallback_depth:
            return
        elif tag == f"{_W}t" and text:
            self._text(text)
        elif tag == f"{_W}tab":
            self._text("\t")
        elif tag in (f"{_W}br", f"{_W}cr"):
            self._text("\n")
        elif tag == f"{_W}pStyle" and self._in_top_paragraph:
            self._style = value
        elif tag == f"{_W}outlineLvl" and self._in_top_paragraph and (value or "").isdigit():
            self._outline = int(value or "9")
        elif tag == f"{_W}p":
            self._end_paragraph()
        else:
            self._end_table_part(tag)

    @property
    def _in_top_paragraph(self) -> bool:
        return self._paragraph_depth == 1 and not self._tables

    def _text(self, text: str) -> None:
        self._read_chars += len(text)
        if self._read_chars > self._max_chars:
            raise PayloadTooLarge(f"the extracted text is longer than {self._max_chars} characters")
        if self._tables:
            self._tables[0].cell.append(text)
        else:
            self._paragraph.append(text)

    def _end_paragraph(self) -> None:
        self._paragraph_depth -= 1
        if self._tables:
            self._tables[0].cell.append("\n")
        elif self._paragraph_depth == 0:
            text, style, outline = "".join(self._paragraph), self._style, self._outline
            self._paragraph, self._style, self._outline = [], None, None
            level = self._levels.get(style) if style is not None else None
            if level is None and outline is not None and outline < 9:
                level = outline + 1
            if level is not None and text.strip():
                self._builder.heading(level, text)
            else:
                self._builder.block(text)

    def _end_table_part(self, tag: str) -> None:
        if not self._tables:
            return
        outer = self._tables[0]
        if tag == f"{_W}tbl":
            finished = self._tables.pop()
            if not self._tables:
                self._builder.table(finished.rows)
            else:
                outer.cell.append("\n")
        elif len(self._tables) == 1 and tag == f"{_W}tc":
            outer.row.append("".join(outer.cell).strip("\n"))
        elif len(self._tables) == 1 and tag == f"{_W}tr":
            outer.rows.append(outer.row)
            outer.row = []
