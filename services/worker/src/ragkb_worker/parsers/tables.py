"""Ruled tables of PDF pages, found by pdfplumber (pdfminer.six underneath) on the pages that draw lines.

pdfplumber reads the same file a second time, page by page and only when asked, so pages without rules cost
nothing. Finding tables is an improvement over reading their cells as lines, never a reason to fail: when
pdfminer cannot read a page that PDFium could, the page keeps its text-layer reading.
"""

from __future__ import annotations

import io
import logging
from typing import Any

import pdfplumber

from ragkb_worker.parsers.layout import Box

_log = logging.getLogger("ragkb.worker")
_MIN_ROWS = 2
_MIN_COLUMNS = 2


class PageTables:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pdf: Any = None

    def find(self, index: int) -> list[Box]:
        """The ruled tables of page `index` (0-based), as boxes holding their rows."""
        try:
            page = self._open().pages[index]
            height = float(page.height)
            found = [_box(table, height) for table in page.find_tables()]
            page.close()
        except Exception as exc:
            _log.info("no table detection on page %d: %s", index + 1, type(exc).__name__)
            return []
        return [box for box in found if box is not None]

    def _open(self) -> Any:
        if self._pdf is None:
            self._pdf = pdfplumber.open(io.BytesIO(self._data))
        return self._pdf

    def close(self) -> None:
        if self._pdf is not None:
            self._pdf.close()
            self._pdf = None


def _box(table: Any, height: float) -> Box | None:
    rows = [tuple(" ".join((cell or "").split()) for cell in row) for row in table.extract()]
    rows = [row for row in rows if any(row)]
    if len(rows) < _MIN_ROWS or max(len(row) for row in rows) < _MIN_COLUMNS:
        return None
    left, top, right, bottom = (float(value) for value in table.bbox)
    return Box(left, height - bottom, right, height - top, rows=tuple(rows))
