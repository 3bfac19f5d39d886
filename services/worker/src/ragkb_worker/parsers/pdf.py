"""PDF: the text layer, one section per page (page = 1-based page number).

Running headers and footers (lines that recur at the top or bottom of most pages, page numbers included)
are dropped: repeated on every page they would outweigh the content in keyword search. A PDF without a
text layer (a scan) fails with that reason: ragkb does no OCR.
"""

from __future__ import annotations

import io
import logging
import re
import unicodedata
from collections import Counter

import pypdf
from pypdf.errors import PyPdfError

from ragkb_core.errors import ParseFailed, PayloadTooLarge
from ragkb_core.settings import LimitSettings
from ragkb_worker.parsers.model import ParsedDocument, Section
from ragkb_worker.parsers.office import check_page_count
from ragkb_worker.parsers.regulations import find_markers, split_regulations

PAGE_SEPARATOR = "\n\n"
# How many lines at each edge of a page may be a running header or footer.
_EDGE_LINES = 3
# A line is running when it recurs on more than this share of the pages (and on two at least).
_RUNNING_SHARE = 0.5
_DIGITS = re.compile(r"\d+")
_GARBAGE_CATEGORIES = frozenset({"Co", "Cn", "Cc", "Cs"})
# Which of a line's numbers may be the page number: the first few (© 2024 ACME · 3 / 9).
_NUMBERS_TRIED = 3

# pypdf logs every recoverable flaw of a file as a warning: that is noise in the worker's log.
logging.getLogger("pypdf").setLevel(logging.ERROR)


def parse_pdf(data: bytes, limits: LimitSettings) -> ParsedDocument:
    reader = _open(data)
    check_page_count(len(reader.pages), "pages", limits)
    pages = _page_texts(reader, limits)
    if not any(_has_letters(page) for page in pages):
        raise ParseFailed(
            f"the PDF has no text layer: its {len(pages)} page(s) hold only images (a scan?), and ragkb does no "
            "OCR; upload a PDF with text, or run it through OCR first"
        )
    if not readable("".join(pages)):
        raise ParseFailed(
            "the PDF's text layer is unreadable: its fonts map glyphs to no characters; run it through OCR first"
        )
    return _document(drop_running_lines(pages))


def _open(data: bytes) -> pypdf.PdfReader:
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        # An empty user password opens the many PDFs that are encrypted only to restrict printing or copying.
        locked = reader.is_encrypted and not reader.decrypt("")
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        raise ParseFailed(f"the PDF cannot be read (damaged or not a PDF): {exc}") from exc
    if locked:
        raise ParseFailed("the PDF is protected by a password")
    return reader


def _page_texts(reader: pypdf.PdfReader, limits: LimitSettings) -> list[str]:
    """Each page's text; stops at the text limit rather than extracting the rest of a huge file."""
    texts: list[str] = []
    total = 0
    for number, page in enumerate(reader.pages, start=1):
        try:
            text = page.extract_text() or ""
        except (PyPdfError, ValueError, KeyError, TypeError) as exc:
            raise ParseFailed(f"the text of page {number} cannot be read: {exc}") from exc
        total += len(text)
        if total > limits.max_text_chars:
            raise PayloadTooLarge(f"the extracted text is longer than {limits.max_text_chars} characters")
        texts.append(text.replace("\r\n", "\n").replace("\r", "\n").strip("\n").rstrip())
    return texts


def _has_letters(text: str) -> bool:
    return any(unicodedata.category(c)[0] in "LN" for c in text)


def readable(text: str) -> bool:
    """False when most characters are private-use, unassigned, control or replacement characters: what a
    font without a Unicode mapping extracts as."""
    visible = [c for c in text if not c.isspace()]
    garbage = sum(1 for c in visible if c == "\ufffd" or unicodedata.category(c) in _GARBAGE_CATEGORIES)
    return garbage * 2 <= len(visible)


def drop_running_lines(pages: list[str]) -> list[str]:
    """Pages without the lines that recur at their top or bottom on most pages."""
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


def _document(pages: list[str]) -> ParsedDocument:
    parts: list[str] = []
    sections: list[Section] = []
    position = 0
    for number, page in enumerate(pages, start=1):
        if parts:
            parts.append(PAGE_SEPARATOR)
            position += len(PAGE_SEPARATOR)
        parts.append(page)
        if page.strip():
            sections.append(Section((), position, position + len(page), page=number))
        position += len(page)
    text = "".join(parts)
    return ParsedDocument(text, split_regulations(text, sections, flowing=True))
