"""HTML: visible text in reading order; h1–h6 give the heading path, tables keep their header row.

The standard library's tolerant HTMLParser is enough: ragkb needs the text and its outline, not a DOM.
"""

from __future__ import annotations

from html.parser import HTMLParser

from ragkb_core.settings import LimitSettings
from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.model import ParsedDocument
from ragkb_worker.parsers.text import decode_text

_HEADINGS = {f"h{level}": level for level in range(1, 7)}
# Elements whose content a reader never sees as text.
_HIDDEN = frozenset({"script", "style", "noscript", "template", "head", "svg", "iframe", "object"})
# Elements that end a block of text: what follows starts a new paragraph.
_BLOCKS = frozenset(
    {"p", "div", "section", "article", "main", "header", "footer", "aside", "nav", "li", "ul", "ol", "dl", "dt", "dd"}
    | {"blockquote", "pre", "form", "fieldset", "figure", "figcaption", "address", "details", "summary", "hr"}
)
# A <br> inside text, kept apart from the source's own line breaks (which are mere spaces).
_BREAK = "\u2028"


def parse_html(data: bytes, limits: LimitSettings) -> ParsedDocument:
    reader = _OutlineReader(OutlineBuilder(limits.max_text_chars))
    reader.feed(decode_text(data))
    reader.close()
    return reader.finish()


class _OutlineReader(HTMLParser):
    def __init__(self, builder: OutlineBuilder) -> None:
        super().__init__(convert_charrefs=True)
        self._builder = builder
        self._hidden_depth = 0
        self._inline: list[str] = []
        self._heading: int | None = None
        self._pre_depth = 0
        self._table_depth = 0
        self._rows: list[list[str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN:
            self._hidden_depth += 1
        elif tag in _HEADINGS and not self._table_depth:
            self._flush()
            self._heading = _HEADINGS[tag]
        elif tag == "table":
            self._start_table()
        elif self._table_depth == 1 and tag == "tr":
            self._rows.append([])
        elif self._table_depth == 1 and tag in ("td", "th"):
            self._start_cell()
        elif tag == "br":
            self._inline.append(_BREAK)
        elif tag in _BLOCKS:
            self._flush()
        self._pre_depth += tag == "pre"

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN:
            self._hidden_depth = max(0, self._hidden_depth - 1)
        elif tag in _HEADINGS and self._heading is not None:
            self._end_heading(self._heading)
        elif tag == "table":
            self._end_table()
        elif self._table_depth == 1 and tag in ("td", "th"):
            self._end_cell()
        elif tag in _BLOCKS:
            self._flush()
        self._pre_depth = max(0, self._pre_depth - (tag == "pre"))

    def handle_data(self, data: str) -> None:
        if not self._hidden_depth:
            self._inline.append(data)

    def finish(self) -> ParsedDocument:
        self._flush()
        return self._builder.build()

    def _end_heading(self, level: int) -> None:
        title = _collapse("".join(self._inline))
        self._inline, self._heading = [], None
        if title:  # an empty heading (an image, an anchor) names nothing
            self._builder.heading(level, title)

    def _start_table(self) -> None:
        if not self._table_depth:
            self._flush()
            self._rows = []
        self._table_depth += 1

    def _end_table(self) -> None:
        self._table_depth = max(0, self._table_depth - 1)
        if not self._table_depth:
            self._builder.table(self._rows)
            self._rows, self._inline = [], []

    def _start_cell(self) -> None:
        self._inline = []
        if not self._rows:  # a cell outside any <tr>: browsers open a row for it
            self._rows.append([])

    def _end_cell(self) -> None:
        if not self._rows:
            self._rows.append([])
        self._rows[-1].append(_collapse("".join(self._inline)))
        self._inline = []

    def _flush(self) -> None:
        """End the current block of inline text (inside a table, text waits for its cell's end)."""
        if self._table_depth or self._heading is not None:
            return
        raw = "".join(self._inline)
        self._inline = []
        if self._pre_depth:
            text = raw.replace(_BREAK, "\n").strip("\n")
        else:
            text = "\n".join(_collapse(line) for line in raw.split(_BREAK)).strip()
        self._builder.block(text)


def _collapse(text: str) -> str:
    return " ".join(text.replace(_BREAK, " ").split())
