"""HTML: visible text in reading order; h1–h6 give the heading path, tables keep their header row.

A web page's boilerplate (navigation, cookie banners, sidebars of links, footers) is removed first by
trafilatura, which keeps the main content as HTML with its headings and tables. Measured against
readability-lxml on pages with and without boilerplate: both kept a plain document whole and dropped header,
navigation, cookie banner and footer from an intranet page, but readability kept a Japanese page's navigation
menu, which trafilatura dropped. When trafilatura finds no main content, or keeps under a tenth of the page's
text (a page of links, a table of contents), the whole page is read.

The standard library's tolerant HTMLParser then reads the text: ragkb needs the text and its outline, not a DOM.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from html.parser import HTMLParser

import trafilatura

from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.model import ParsedDocument, ParseOptions
from ragkb_worker.parsers.text import decode_text

_log = logging.getLogger("ragkb.worker")
logging.getLogger("trafilatura").setLevel(logging.ERROR)
# Main content shorter than a tenth of the page's text is not trusted: the page is read whole.
_MIN_MAIN_SHARE = 10
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
# Elements whose content a reader never sees as text.
_HIDDEN = frozenset({"script", "style", "noscript", "template", "head", "svg", "iframe", "object"})
# Elements that end a block of text: what follows starts a new paragraph.
_BLOCKS = frozenset(
    {"p", "div", "section", "article", "main", "header", "footer", "aside", "nav", "li", "ul", "ol", "dl", "dt", "dd"}
    | {"blockquote", "pre", "form", "fieldset", "figure", "figcaption", "address", "details", "summary", "hr"}
)
# Page furniture that HTML marks as such: navigation, sidebars, footers.
_BOILERPLATE = frozenset({"nav", "aside", "footer"})
# A page's <header> (role banner) often holds its title: it stays, with the navigation inside it dropped.
_BOILERPLATE_ROLES = frozenset({"navigation", "contentinfo", "complementary", "search"})
# A <br> inside text, kept apart from the source's own line breaks (which are mere spaces).
_BREAK = "\u2028"


def parse_html(data: bytes, options: ParseOptions) -> ParsedDocument:
    html = decode_text(data)
    whole = _read(html, options, drop_boilerplate=False)
    best = whole
    semantic = _read(html, options, drop_boilerplate=True)
    if _keeps_content(semantic, whole, headings=False):  # a sidebar's own headings go with it
        best = semantic
    main = main_content(html)
    if main is not None and _keeps_content(content := _read(main, options, drop_boilerplate=False), best):
        best = content
    removed = len(whole.text) - len(best.text)
    return replace(best, report={"boilerplate_removed_chars": removed}) if removed > 0 else best


def _keeps_content(candidate: ParsedDocument, reference: ParsedDocument, *, headings: bool = True) -> bool:
    """A reading without boilerplate is trusted when it keeps a tenth of the reference's text at least (a page
    of links may have no main content at all) and, for trafilatura's, every heading of the reference
    (trafilatura flattens a small page's outline into one paragraph)."""
    if not candidate.text.strip() or len(candidate.text) * _MIN_MAIN_SHARE < len(reference.text):
        return False
    wanted = {s.heading_path[-1] for s in reference.sections if s.heading_path}
    kept = {s.heading_path[-1] for s in candidate.sections if s.heading_path}
    return not headings or wanted <= kept


def _read(html: str, options: ParseOptions, *, drop_boilerplate: bool) -> ParsedDocument:
    builder = OutlineBuilder(options.limits.max_text_chars)
    read_html_into(builder, html, drop_boilerplate=drop_boilerplate)
    return builder.build()


def main_content(html: str) -> str | None:
    """The page's main content as HTML (headings, paragraphs, lists, tables), or None when none is found."""
    try:
        extracted = trafilatura.extract(
            html, output_format="html", include_tables=True, include_comments=False, favor_recall=True
        )
    except Exception as exc:
        _log.info("no boilerplate removal: %s", type(exc).__name__)
        return None
    return extracted if isinstance(extracted, str) and extracted.strip() else None


def read_html_into(builder: OutlineBuilder, html: str, *, drop_boilerplate: bool = False) -> None:
    """Write the visible text of `html` into `builder` (an EPUB's chapters, a mail's HTML body share one).
    `drop_boilerplate`: leave out navigation, sidebars and footers marked as such."""
    reader = _OutlineReader(builder, drop_boilerplate)
    reader.feed(html)
    reader.close()
    reader.flush()


class _OutlineReader(HTMLParser):
    def __init__(self, builder: OutlineBuilder, drop_boilerplate: bool = False) -> None:
        super().__init__(convert_charrefs=True)
        self._builder = builder
        self._drop_boilerplate = drop_boilerplate
        self._boilerplate: tuple[str, int] | None = None  # the tag that opened it, and its nesting inside it
        self._hidden_depth = 0
        self._inline: list[str] = []
        self._heading: int | None = None
        self._pre_depth = 0
        self._table_depth = 0
        self._rows: list[list[str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._drop_boilerplate and self._enter_boilerplate(tag, attrs):
            return
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
        if self._boilerplate is not None:
            self._leave_boilerplate(tag)
            return
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
        if not self._hidden_depth and self._boilerplate is None:
            self._inline.append(data)

    def flush(self) -> None:
        self._flush()

    def _enter_boilerplate(self, tag: str, attrs: list[tuple[str, str | None]]) -> bool:
        """True while inside boilerplate (this tag included); counts the nesting of the tag that opened it."""
        if self._boilerplate is not None:
            opener, depth = self._boilerplate
            self._boilerplate = (opener, depth + (tag == opener))
            return True
        role = next((value for name, value in attrs if name == "role"), None)
        if tag in _BOILERPLATE or role in _BOILERPLATE_ROLES:
            self._flush()
            self._boilerplate = (tag, 1)
            return True
        return False

    def _leave_boilerplate(self, tag: str) -> None:
        assert self._boilerplate is not None
        opener, depth = self._boilerplate
        if tag == opener:
            self._boilerplate = (opener, depth - 1) if depth > 1 else None

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
