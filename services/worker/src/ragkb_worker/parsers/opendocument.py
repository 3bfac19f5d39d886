"""OpenDocument text, spreadsheet and presentation (.odt, .ods, .odp), read from content.xml as a stream.

Text: headings (text:h, by outline level) give the heading path, paragraphs and lists are blocks, tables keep
their header row. Spreadsheet: each sheet is a table section under its name, as in Excel. Presentation: one
section per slide (page = slide number) under the slide's name, its notes included. Repeated rows and cells
(table:number-rows-repeated, …-columns-repeated) are expanded only while they hold text and within a cell
budget, so that a sheet declaring a billion empty cells costs nothing.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field

from lxml import etree

from ragkb_core import formats
from ragkb_core.errors import ParseFailed, PayloadTooLarge
from ragkb_worker.parsers.archive import (
    iterparse,
    open_zip,
    read_member,
    refuse_dtds,
    require_member,
    streamed_member,
)
from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.model import ParsedDocument, ParseOptions
from ragkb_worker.parsers.office import check_page_count
from ragkb_worker.parsers.regulations import split_regulations

CONTENT = "content.xml"
_KINDS = {
    formats.ODT: "OpenDocument text (.odt)",
    formats.ODS: "OpenDocument spreadsheet (.ods)",
    formats.ODP: "OpenDocument presentation (.odp)",
}
_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
_DRAW = "{urn:oasis:names:tc:opendocument:xmlns:drawing:1.0}"
_TAGS = (
    f"{_TEXT}p",
    f"{_TEXT}h",
    f"{_TABLE}table",
    f"{_TABLE}table-row",
    f"{_TABLE}table-cell",
    f"{_TABLE}covered-table-cell",
    f"{_DRAW}page",
)
# Repeated cells or rows with text are written out at most this many times (a merged header is one cell).
_MAX_REPEAT = 100
_CELLS_PER_CHAR = 4
_MAX_TITLE = 100


def parse_opendocument(data: bytes, options: ParseOptions, media_type: str) -> ParsedDocument:
    kind = _KINDS[media_type]
    archive = open_zip(data, kind, options.limits)
    _check_mimetype(archive, media_type, kind)
    require_member(archive, CONTENT, kind)
    refuse_dtds(archive, kind)
    builder = OutlineBuilder(options.limits.max_text_chars)
    reader = _ContentReader(builder, media_type, options)
    with streamed_member(archive, CONTENT, kind) as stream:
        for event, element in iterparse(stream, _TAGS, ("start", "end"), max_text_chars=options.limits.max_text_chars):
            reader.handle(event, element)
    parsed = builder.build()
    if media_type == formats.ODT:
        return ParsedDocument(parsed.text, split_regulations(parsed.text, parsed.sections))
    return parsed


def parse_odt(data: bytes, options: ParseOptions) -> ParsedDocument:
    return parse_opendocument(data, options, formats.ODT)


def parse_ods(data: bytes, options: ParseOptions) -> ParsedDocument:
    return parse_opendocument(data, options, formats.ODS)


def parse_odp(data: bytes, options: ParseOptions) -> ParsedDocument:
    return parse_opendocument(data, options, formats.ODP)


def _check_mimetype(archive: zipfile.ZipFile, media_type: str, kind: str) -> None:
    if "mimetype" not in archive.namelist():
        return  # optional in the standard; content.xml is what is read
    declared = read_member(archive, "mimetype", kind).decode("ascii", errors="replace").strip()
    if declared != media_type:
        raise ParseFailed(f"the file is not an {kind} file: it declares itself {declared[:80]!r}")


@dataclass
class _Table:
    rows: list[list[str]] = field(default_factory=list)
    row: list[str] = field(default_factory=list)
    cell: list[str] = field(default_factory=list)


class _ContentReader:
    def __init__(self, builder: OutlineBuilder, media_type: str, options: ParseOptions) -> None:
        self._builder = builder
        self._media_type = media_type
        self._options = options
        self._tables: list[_Table] = []
        self._slides = 0
        # A slide is named by its first paragraph (its title, as writers put the title frame first).
        self._untitled_slide = False
        self._chars = 0
        self._cells_left = options.limits.max_text_chars * _CELLS_PER_CHAR

    def handle(self, event: str, element: etree._Element) -> None:
        tag = element.tag
        if event == "start":
            self._start(tag, element)
        elif tag in (f"{_TEXT}p", f"{_TEXT}h"):
            self._paragraph(tag, element)
        elif tag == f"{_TABLE}table":
            self._end_table(element)
        elif len(self._tables) == 1 and tag == f"{_TABLE}table-row":
            self._end_row(element)
        elif len(self._tables) == 1 and tag in (f"{_TABLE}table-cell", f"{_TABLE}covered-table-cell"):
            self._end_cell(element)

    def _start(self, tag: str, element: etree._Element) -> None:
        if tag == f"{_TABLE}table":
            self._tables.append(_Table())
        elif tag == f"{_DRAW}page":
            self._slides += 1
            check_page_count(self._slides, "slides", self._options.limits)
            self._untitled_slide = True

    def _paragraph(self, tag: str, element: etree._Element) -> None:
        text = paragraph_text(element)
        self._count(len(text))
        if self._untitled_slide and text.strip():
            title = " ".join(text.split())[:_MAX_TITLE]
            self._builder.reset_path([title or f"Slide {self._slides}"], page=self._slides)
            self._untitled_slide = False
        if self._tables:
            self._tables[0].cell.append(text)
        elif tag == f"{_TEXT}h" and text.strip():
            level = element.get(f"{_TEXT}outline-level") or "1"
            self._builder.heading(int(level) if level.isdigit() else 1, text)
        else:
            self._builder.block(text)

    def _end_cell(self, element: etree._Element) -> None:
        table = self._tables[0]
        text = "\n".join(part for part in table.cell if part.strip())
        table.cell = []
        # Only what is written out is spent: writers pad every row with a thousand repeated empty cells.
        written = min(_repeat(element, f"{_TABLE}number-columns-repeated"), _MAX_REPEAT if text else 1)
        self._spend(written)
        table.row.extend([text] * written)

    def _end_row(self, element: etree._Element) -> None:
        table = self._tables[0]
        row, table.row = table.row, []
        while row and not row[-1]:
            row.pop()
        if row:
            written = min(_repeat(element, f"{_TABLE}number-rows-repeated"), _MAX_REPEAT)
            self._spend(len(row) * written)
            table.rows.extend([row] * written)

    def _end_table(self, element: etree._Element) -> None:
        table = self._tables.pop()
        if self._tables:  # a table inside a cell: its text flows into the outer cell
            self._tables[0].cell.extend(cell for row in table.rows for cell in row)
            return
        if self._media_type == formats.ODS:
            self._builder.heading(1, element.get(f"{_TABLE}name") or "Sheet")
        self._builder.table(table.rows)

    def _count(self, chars: int) -> None:
        self._chars += chars
        if self._chars > self._options.limits.max_text_chars:
            raise PayloadTooLarge(f"the extracted text is longer than {self._options.limits.max_text_chars} characters")

    def _spend(self, cells: int) -> None:
        self._cells_left -= cells
        if self._cells_left < 0:
            raise PayloadTooLarge("the document has too many table cells (repeated ones included) to be read")


def _repeat(element: etree._Element, attribute: str) -> int:
    value = element.get(attribute) or "1"
    return max(1, int(value)) if value.isdigit() else 1


def paragraph_text(element: etree._Element) -> str:
    """A paragraph's text: spans and links inline, text:s as spaces, tabs and line breaks kept, notes left out."""
    parts: list[str] = [element.text or ""]
    for child in element:
        parts.append(_inline(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _inline(child: etree._Element) -> str:
    tag = child.tag
    if tag == f"{_TEXT}s":
        count = child.get(f"{_TEXT}c") or "1"
        return " " * min(int(count) if count.isdigit() else 1, 100)
    if tag == f"{_TEXT}tab":
        return "\t"
    if tag == f"{_TEXT}line-break":
        return "\n"
    if tag in (f"{_TEXT}note", f"{_TEXT}annotation"):
        return ""
    return paragraph_text(child)
