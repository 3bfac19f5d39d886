"""Excel (.xlsx): each sheet is a table section under the sheet's name, its first non-empty row the header.

openpyxl streams the sheets (read-only mode), but it holds the shared-strings table and the other parts whole:
those are checked first (the strings' total length against the text limit, the rest against the size of a
part read whole), so that a small file cannot unpack into gigabytes of Python objects.
"""

from __future__ import annotations

import datetime as dt
import io
import warnings
import zipfile
from collections.abc import Iterator

import openpyxl
from openpyxl.worksheet._read_only import ReadOnlyWorksheet

from ragkb_core import formats
from ragkb_core.errors import PayloadTooLarge
from ragkb_worker.parsers.archive import check_whole_part, iterparse, library_errors, streamed_member
from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.model import ParsedDocument, ParseOptions
from ragkb_worker.parsers.office import MAIN_PARTS, check_office_archive

KIND = MAIN_PARTS[formats.XLSX][1]
SHARED_STRINGS = "xl/sharedStrings.xml"
_MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
# Parts openpyxl loads whole in read-only mode (worksheets are streamed; pivot caches, drawings and the like
# are not read at all).
_WHOLE_PARTS = ("[Content_Types].xml", "xl/workbook.xml", "xl/styles.xml", "xl/_rels/workbook.xml.rels")
_WHOLE_PREFIXES = ("docProps/", "xl/theme/")
# Cells visited (empty ones included: a row is as wide as its last cell) per character of the text limit.
_CELLS_PER_CHAR = 4


def parse_xlsx(data: bytes, options: ParseOptions) -> ParsedDocument:
    archive = check_office_archive(data, formats.XLSX, options.limits)
    _check_parts(archive, options.limits.max_text_chars)
    builder = OutlineBuilder(options.limits.max_text_chars)
    with warnings.catch_warnings(), library_errors(KIND):
        # openpyxl warns about workbook features it does not read (data validation, styles): not our concern.
        warnings.simplefilter("ignore", UserWarning)
        # read_only streams rows instead of building every cell; data_only reads formulas' cached values.
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        try:
            budget = _CellBudget(options.limits.max_text_chars)
            for sheet in workbook.worksheets:
                builder.heading(1, sheet.title)
                builder.table(list(_sheet_rows(sheet, budget)))
        finally:
            workbook.close()
    return builder.build()


def _check_parts(archive: zipfile.ZipFile, max_chars: int) -> None:
    for name in archive.namelist():
        if name in _WHOLE_PARTS or name.startswith(_WHOLE_PREFIXES):
            check_whole_part(archive, name, KIND)
    if SHARED_STRINGS in archive.namelist():
        _check_shared_strings(archive, max_chars)


def _check_shared_strings(archive: zipfile.ZipFile, max_chars: int) -> None:
    """Stream the shared strings: more characters (or strings) than the text limit would hold refuses the file
    before openpyxl loads them all."""
    total = 0
    with streamed_member(archive, SHARED_STRINGS, KIND) as stream:
        for _, element in iterparse(stream, (f"{_MAIN}t", f"{_MAIN}si"), max_text_chars=max_chars):
            total += len(element.text or "") if element.tag == f"{_MAIN}t" else 1
            if total > max_chars:
                raise PayloadTooLarge(
                    f"the workbook's shared strings hold more than {max_chars} characters (the text limit)"
                )


class _CellBudget:
    """Bounds the cells visited, empty ones included, so that a sheet whose rows reach column XFD with nothing
    in between cannot keep a worker busy for hours."""

    def __init__(self, max_chars: int) -> None:
        self._left = max_chars * _CELLS_PER_CHAR

    def spend(self, cells: int) -> None:
        self._left -= cells
        if self._left < 0:
            raise PayloadTooLarge("the workbook has too many cells (empty ones included) to be read")


def _sheet_rows(sheet: object, budget: _CellBudget) -> Iterator[list[str]]:
    if not isinstance(sheet, ReadOnlyWorksheet):
        return
    # The declared dimension may claim A1:XFD1048576: rows are then padded to its width. Without it, each row
    # is as wide as its own last cell and missing rows come as empty tuples.
    sheet.reset_dimensions()
    rows: Iterator[tuple[object, ...]] = sheet.iter_rows(values_only=True)  # type: ignore[misc]  # stubs: Worksheet only
    yield from _rows(rows, budget)


def _rows(rows: Iterator[tuple[object, ...]], budget: _CellBudget) -> Iterator[list[str]]:
    """Non-empty rows as text cells (the builder stops at the text limit)."""
    for row in rows:
        budget.spend(len(row) + 1)
        cells = [cell_text(value) for value in row]
        if any(cells):
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
