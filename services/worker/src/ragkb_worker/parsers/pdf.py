"""PDF: the text layer read in layout order, ruled tables as tables, scanned pages by OCR; one section per page
(page = 1-based page number).

PDFium (pypdfium2) reads the text as positioned segments; the segments are ordered by recursive XY cuts so that
columns are read one after the other (ragkb_worker.parsers.layout). Pages that draw lines are also given to
pdfplumber, whose table finder turns ruled tables into rows that keep their header. A page without a usable text
layer (an image with next to no text, or a text layer whose fonts map to no characters) is rendered and OCRed,
when the KB allows OCR and within the OCR page and time budgets.

Running headers and footers (lines that recur at the top or bottom of most pages, page numbers included)
are dropped: repeated on every page they would outweigh the content in keyword search.

`read_page_range` reads pages [first, stop) on their own: the unit that long documents can be split into and
read in parallel, each range with its own OCR budget; `assemble` joins the pages of all ranges.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_raw

from ragkb_core.errors import ParseFailed, PayloadTooLarge
from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.layout import Box, ordered_blocks
from ragkb_worker.parsers.model import ParsedDocument, ParseOptions
from ragkb_worker.parsers.ocr import DPI, OcrText, check_time_left, recognise
from ragkb_worker.parsers.ocr_report import ocr_report
from ragkb_worker.parsers.office import check_page_count
from ragkb_worker.parsers.regulations import find_markers, split_regulations
from ragkb_worker.parsers.tables import PageTables

# How many lines at each edge of a page may be a running header or footer.
_EDGE_LINES = 3
# A line is running when it recurs on more than this share of the pages (and on two at least).
_RUNNING_SHARE = 0.5
_DIGITS = re.compile(r"\d+")
_GARBAGE_CATEGORIES = frozenset({"Co", "Cn", "Cc", "Cs"})
# Which of a line's numbers may be the page number: the first few (© 2024 ACME · 3 / 9).
_NUMBERS_TRIED = 3
# A page with fewer letters than this in its text layer, drawn mostly as an image (or as many vector paths:
# outlined text), is a scan: a stamp, a page number or a scanner's header line is all its text layer holds.
# A page with no letters at all and any image is OCRed too (a small scan pasted on a page).
_SCAN_MAX_LETTERS = 16
_SCAN_MIN_IMAGE_SHARE = 0.2
_SCAN_MIN_PATHS = 100
# Pages drawing at least this many path objects may hold a ruled table.
_TABLE_MIN_PATHS = 4

logging.getLogger("pdfminer").setLevel(logging.ERROR)


@dataclass(frozen=True)
class Block:
    """A run of lines, or a table (rows of cells, the first the header)."""

    text: str = ""
    rows: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class PdfPage:
    number: int
    blocks: tuple[Block, ...]
    ocr: OcrText | None = None  # the page was OCRed
    unread: str | None = None  # why a page to OCR was left unread (the KB has OCR off): "image" or "unmapped"


def parse_pdf(data: bytes, options: ParseOptions) -> ParsedDocument:
    with _opened(data) as document:
        check_page_count(len(document), "pages", options.limits)
        pages = _read(document, data, 0, len(document), options.with_deadline())
    return assemble(pages, options)


def read_page_range(data: bytes, first: int, stop: int, options: ParseOptions) -> list[PdfPage]:
    """Pages [first, stop) (0-based, clipped to the document), each with its 1-based number."""
    with _opened(data) as document:
        return _read(document, data, max(0, first), min(stop, len(document)), options.with_deadline())


def assemble(pages: list[PdfPage], options: ParseOptions) -> ParsedDocument:
    """The document from its pages (in order; from one range or several)."""
    if not any(_has_letters(block.text) or block.rows for page in pages for block in page.blocks):
        raise _no_text(pages, options)
    kept = _without_running_lines(pages)
    builder = OutlineBuilder(options.limits.max_text_chars)
    for page in kept:
        builder.reset_path([], page=page.number)
        for block in page.blocks:
            if block.rows:
                builder.table(block.rows)
            else:
                builder.block(block.text)
    parsed = builder.build()
    return ParsedDocument(parsed.text, split_regulations(parsed.text, parsed.sections, flowing=True), _report(pages))


@contextmanager
def _opened(data: bytes) -> Iterator[pdfium.PdfDocument]:
    try:
        # An empty user password opens the many PDFs that are encrypted only to restrict printing or copying.
        document = pdfium.PdfDocument(data, password="")
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise ParseFailed("the PDF is protected by a password") from exc
        raise ParseFailed(f"the PDF cannot be read: it is damaged or not a PDF ({_pdfium_reason(exc)})") from exc
    try:
        yield document
    finally:
        document.close()


def _pdfium_reason(exc: pdfium.PdfiumError) -> str:
    match = re.search(r"PDFium: ([^)]+)", str(exc))
    return match.group(1).lower() if match else "unreadable structure"


def _read(document: pdfium.PdfDocument, data: bytes, first: int, stop: int, options: ParseOptions) -> list[PdfPage]:
    tables = PageTables(data)
    scanned: list[tuple[int, str]] = []
    pages: list[PdfPage] = []
    budget = _TextBudget(options.limits.max_text_chars)
    try:
        for index in range(first, stop):
            page, to_ocr = _read_text_layer(document, index, tables)
            budget.spend(page)
            pages.append(page)
            if to_ocr is not None:
                scanned.append((len(pages) - 1, to_ocr))
    finally:
        tables.close()
    if scanned and options.ocr:
        _check_ocr_pages(len(scanned), options)
        for done, (position, _) in enumerate(scanned):
            check_time_left(options, done, len(scanned))
            pages[position] = _ocr_page(document, pages[position].number - 1, options)
            budget.spend(pages[position])
            options.beat()
    else:
        for position, why in scanned:
            pages[position] = replace(pages[position], unread=why)
    return pages


class _TextBudget:
    """Stops reading once the pages hold more text than the limit, rather than reading the rest of a huge file."""

    def __init__(self, max_chars: int) -> None:
        self._max_chars = max_chars
        self._left = max_chars

    def spend(self, page: PdfPage) -> None:
        self._left -= sum(
            len(block.text) + sum(len(cell) for row in block.rows for cell in row) for block in page.blocks
        )
        if self._left < 0:
            raise PayloadTooLarge(f"the extracted text is longer than {self._max_chars} characters")


def _read_text_layer(document: pdfium.PdfDocument, index: int, tables: PageTables) -> tuple[PdfPage, str | None]:
    """The page from its text layer, and why it is to be OCRed instead ("image", "unmapped"), if it is."""
    page = document[index]
    try:
        segments, text = _segments(page, index)
        paths, image_share = _drawing(page)
        letters = sum(1 for char in text if unicodedata.category(char)[0] in "LN")
        drawn = image_share >= _SCAN_MIN_IMAGE_SHARE or paths >= _SCAN_MIN_PATHS or (image_share and not letters)
        if letters < _SCAN_MAX_LETTERS and drawn:
            return PdfPage(index + 1, ()), "image"
        if letters and not readable(text):
            return PdfPage(index + 1, ()), "unmapped"
        found = tables.find(index) if paths >= _TABLE_MIN_PATHS else []
        blocks = tuple(_block(item) for item in ordered_blocks(segments, found))
        return PdfPage(index + 1, blocks), None
    finally:
        page.close()


def _segments(page: pdfium.PdfPage, index: int) -> tuple[list[Box], str]:
    textpage = page.get_textpage()
    try:
        boxes = []
        for rect in range(textpage.count_rects()):
            left, bottom, right, top = textpage.get_rect(rect)
            text = " ".join(textpage.get_text_bounded(left, bottom, right, top).split())
            if text:
                boxes.append(Box(left, bottom, right, top, text=text))
        return boxes, "".join(box.text or "" for box in boxes)
    except pdfium.PdfiumError as exc:
        raise ParseFailed(f"the text of page {index + 1} cannot be read: {exc}") from exc
    finally:
        textpage.close()


def _drawing(page: pdfium.PdfPage) -> tuple[int, float]:
    """How many path objects the page draws, and the share of its area that images cover."""
    width, height = page.get_size()
    paths = 0
    image_area = 0.0
    for item in page.get_objects(filter=[pdfium_raw.FPDF_PAGEOBJ_PATH, pdfium_raw.FPDF_PAGEOBJ_IMAGE], max_depth=4):
        if item.type == pdfium_raw.FPDF_PAGEOBJ_PATH:
            paths += 1
        else:
            left, bottom, right, top = item.get_bounds()
            image_area += max(0.0, right - left) * max(0.0, top - bottom)
    return paths, min(1.0, image_area / max(1.0, width * height))


def _block(item: Box) -> Block:
    if item.rows is not None:
        return Block(rows=item.rows)
    return Block(text=item.text or "")


def _check_ocr_pages(count: int, options: ParseOptions) -> None:
    if count > options.limits.max_ocr_pages:
        raise PayloadTooLarge(
            f"the PDF has {count} scanned pages (no text layer), more than the {options.limits.max_ocr_pages} that "
            "are OCRed in one document (RAGKB_LIMITS__MAX_OCR_PAGES); split it into smaller files"
        )


def _ocr_page(document: pdfium.PdfDocument, index: int, options: ParseOptions) -> PdfPage:
    page = document[index]
    try:
        width, height = page.get_size()
        scale = min(DPI / 72, (options.limits.max_image_pixels / max(1.0, width * height)) ** 0.5)
        bitmap = page.render(scale=scale, grayscale=True, may_draw_forms=True)
        try:
            image = bitmap.to_pil()
            reading = recognise(image, options, f"page {index + 1}")
        finally:
            bitmap.close()
    finally:
        page.close()
    blocks = tuple(Block(text=part) for part in reading.text.split("\n\n") if part.strip())
    return PdfPage(index + 1, blocks, ocr=reading)


def _no_text(pages: list[PdfPage], options: ParseOptions) -> ParseFailed:
    if any(page.unread == "unmapped" for page in pages):
        return ParseFailed(
            "the PDF's text layer is unreadable: its fonts map glyphs to no characters, and OCR is off for this "
            "knowledge base (chunking.ocr); turn it on, or run the file through OCR first"
        )
    if any(page.unread for page in pages):
        return ParseFailed(
            f"the PDF has no text layer: its {len(pages)} page(s) hold only images (a scan?), and OCR is off for "
            "this knowledge base (chunking.ocr); turn it on, or upload a PDF with text"
        )
    if any(page.ocr is not None for page in pages):
        return ParseFailed(f"OCR found no text on the PDF's {len(pages)} scanned page(s)")
    return ParseFailed("the PDF contains no text")


def _report(pages: list[PdfPage]) -> dict[str, object]:
    report: dict[str, object] = {}
    readings = [(page.number, page.ocr) for page in pages if page.ocr is not None]
    if readings:
        report["ocr"] = ocr_report(readings)
    unread = [page.number for page in pages if page.unread]
    if unread:
        report["scanned_pages_not_ocred"] = unread
    tables = sum(1 for page in pages for block in page.blocks if block.rows)
    if tables:
        report["tables"] = tables
    return report


def _has_letters(text: str) -> bool:
    return any(unicodedata.category(c)[0] in "LN" for c in text)


def readable(text: str) -> bool:
    """False when most characters are private-use, unassigned, control or replacement characters: what a
    font without a Unicode mapping extracts as."""
    visible = [c for c in text if not c.isspace()]
    garbage = sum(1 for c in visible if c == "\ufffd" or unicodedata.category(c) in _GARBAGE_CATEGORIES)
    return garbage * 2 <= len(visible)


# -- running headers and footers ---------------------------------------------------------------------------


def _without_running_lines(pages: list[PdfPage]) -> list[PdfPage]:
    """The pages without the running lines found at the edges of their prose."""
    edges = [_page_prose(page) for page in pages]
    running = _running_keys(edges)
    if not running:
        return pages
    return [_strip_page(page, running) for page in pages]


def _page_prose(page: PdfPage) -> str:
    return "\n".join(block.text for block in page.blocks if not block.rows)


def _strip_page(page: PdfPage, running: set[str]) -> PdfPage:
    prose = [i for i, block in enumerate(page.blocks) if not block.rows]
    if not prose:
        return page
    blocks = list(page.blocks)
    first, last = prose[0], prose[-1]
    blocks[first] = Block(text=_strip_lines(blocks[first].text, page.number, running, top=True))
    blocks[last] = Block(text=_strip_lines(blocks[last].text, page.number, running, top=False))
    return replace(page, blocks=tuple(block for block in blocks if block.rows or block.text.strip()))


def _strip_lines(text: str, number: int, running: set[str], *, top: bool) -> str:
    lines = text.split("\n")
    filled = [i for i, line in enumerate(lines) if line.strip()]
    edge = filled[:_EDGE_LINES] if top else filled[-_EDGE_LINES:]
    dropped = {i for i in edge if _keys(lines[i], number) & running}
    return "\n".join(line for i, line in enumerate(lines) if i not in dropped).strip("\n")


def drop_running_lines(pages: list[str]) -> list[str]:
    """Pages (as text) without the lines that recur at their top or bottom on most pages."""
    running = _running_keys(pages)
    if not running:
        return pages
    return [_without_running(page, number, running) for number, page in enumerate(pages, start=1)]


def _running_keys(pages: list[str]) -> set[str]:
    counts: Counter[str] = Counter()
    for number, page in enumerate(pages, start=1):
        lines = page.split("\n")
        counts.update(set().union(*(_keys(lines[i], number) for i in _edge_indexes(lines))))
    needed = max(2, int(len(pages) * _RUNNING_SHARE) + 1)
    return {key for key, count in counts.items() if count >= needed}


def _without_running(page: str, number: int, running: set[str]) -> str:
    lines = page.split("\n")
    dropped = {i for i in _edge_indexes(lines) if _keys(lines[i], number) & running}
    return "\n".join(line for i, line in enumerate(lines) if i not in dropped).strip("\n")


def _edge_indexes(lines: list[str]) -> list[int]:
    """Indexes of the first and last few non-blank lines."""
    filled = [i for i, line in enumerate(lines) if line.strip()]
    if len(filled) <= 2 * _EDGE_LINES:
        return filled
    return filled[:_EDGE_LINES] + filled[-_EDGE_LINES:]


def _keys(line: str, page: int) -> set[str]:
    """What makes two edge lines the same running line: the same text (© 2024 ACME), or the same text
    around a number that moves with the page number (Page 3 of 9, - 4 -). An article heading never is."""
    normal = " ".join(unicodedata.normalize("NFKC", line).split())
    if not normal or find_markers(normal):
        return set()
    blanked = _DIGITS.sub("#", normal)
    numbers = [int(digits) for digits in _DIGITS.findall(normal)[:_NUMBERS_TRIED]]
    return {normal} | {f"{blanked}@{index}:{value - page}" for index, value in enumerate(numbers)}
