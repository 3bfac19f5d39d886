"""Excel (.xlsx): each sheet is a table section under the sheet's name, its first non-empty row the header."""

from __future__ import annotations

import datetime as dt
import io
import warnings
from collections.abc import Iterator

import openpyxl

from ragkb_core import formats
from ragkb_core.errors import PayloadTooLarge
from ragkb_core.settings import LimitSettings
from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.model import ParsedDocument
from ragkb_worker.parsers.office import check_office_archive


def parse_xlsx(data: bytes, limits: LimitSettings) -> ParsedDocument:
    check_office_archive(data, formats.XLSX, limits)
    builder = OutlineBuilder(limits.max_text_chars)
    with warnings.catch_warnings():
        # openpyxl warns about workbook features it does not read (data validation, styles): not our concern.
        warnings.simplefilter("ignore", UserWarning)
        # read_only streams rows instead of building every cell; data_only reads formulas' cached values.
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            for sheet in workbook.worksheets:
                builder.heading(1, sheet.title)
                builder.table(list(_rows(sheet.iter_rows(values_only=True), limits.max_text_chars)))
        finally:
            workbook.close()
    return builder.build()


def _rows(rows: Iterator[tuple[object, ...]], max_chars: int) -> Iterator[list[str]]:
    """Non-empty rows as text cells; stops with the text limit instead of holding a huge sheet in memory."""
    total = 0
    for row in rows:
        cells = [cell_text(value) for value in row]
        if any(cells):
            total += sum(len(cell) + 3 for cell in cells)
            if total > max_chars:
                raise PayloadTooLarge(f"the extracted text is longer than {max_chars} characters")
            yield cells


def cell_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dt.datetime) and value.time() == dt.time():
        return value.date().isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return str(value)
