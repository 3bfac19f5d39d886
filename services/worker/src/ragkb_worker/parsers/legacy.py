"""Legacy binary Office files and RTF.

.xls is read in-process by xlrd (pure Python, made for exactly this format). .doc, .ppt and RTF have no
maintained pure-Python reader that keeps headings and tables, so LibreOffice converts them (sandboxed, see
ragkb_worker.parsers.convert) to .docx / .pptx, which ragkb's own parsers then read with all their limits.
A compound file is opened first to check it is the kind its type says, so garbage never reaches LibreOffice.
"""

from __future__ import annotations

import io
import struct
from dataclasses import replace

import xlrd
from xlrd.biffh import XLRDError

from ragkb_core.errors import ParseFailed, PayloadTooLarge
from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.compound import open_compound_file
from ragkb_worker.parsers.convert import convert
from ragkb_worker.parsers.excel import cell_text
from ragkb_worker.parsers.model import ParsedDocument, ParseOptions
from ragkb_worker.parsers.office import check_page_count
from ragkb_worker.parsers.powerpoint import parse_pptx
from ragkb_worker.parsers.word import parse_docx

_OLE_ERRORS = (OSError, ValueError, IndexError, KeyError, TypeError, struct.error)
_RTF_SIGNATURE = b"{\\rtf"
_XLS_CELLS_PER_CHAR = 4


def parse_doc(data: bytes, options: ParseOptions) -> ParsedDocument:
    _check_compound_file(data, "WordDocument", "Word 97–2003 (.doc)")
    converted = convert(data, ".doc", "docx", "Word 97–2003 (.doc)", options.limits)
    options.beat()
    return _reported(parse_docx(converted, options), "doc")


def parse_ppt(data: bytes, options: ParseOptions) -> ParsedDocument:
    _check_compound_file(data, "PowerPoint Document", "PowerPoint 97–2003 (.ppt)")
    converted = convert(data, ".ppt", "pptx", "PowerPoint 97–2003 (.ppt)", options.limits)
    options.beat()
    return _reported(parse_pptx(converted, options), "ppt")


def parse_rtf(data: bytes, options: ParseOptions) -> ParsedDocument:
    if not data.lstrip().startswith(_RTF_SIGNATURE):
        raise ParseFailed("the file is not RTF: it does not start with {\\rtf")
    converted = convert(data, ".rtf", "docx", "RTF", options.limits)
    options.beat()
    return _reported(parse_docx(converted, options), "rtf")


def _reported(parsed: ParsedDocument, source: str) -> ParsedDocument:
    return replace(parsed, report={**parsed.report, "converted": {"from": source, "by": "libreoffice"}})


def _check_compound_file(data: bytes, stream: str, kind: str) -> None:
    try:
        with open_compound_file(data) as compound:
            if compound.exists("EncryptedPackage") or compound.exists("encryption"):
                raise ParseFailed(f"the {kind} file is protected by a password")
            if not compound.exists(stream):
                raise ParseFailed(f"the file is not a {kind} file: it has no {stream} stream")
    except _OLE_ERRORS as exc:
        raise ParseFailed(f"the {kind} file is damaged: its compound-file structure cannot be read") from exc


# -- Excel 97–2003 -------------------------------------------------------------------------------------------


def parse_xls(data: bytes, options: ParseOptions) -> ParsedDocument:
    book = _open_xls(data)
    try:
        builder = OutlineBuilder(options.limits.max_text_chars)
        cells_left = options.limits.max_text_chars * _XLS_CELLS_PER_CHAR
        check_page_count(book.nsheets, "sheets", options.limits)
        for index in range(book.nsheets):
            sheet = _sheet(book, index)
            cells_left -= sheet.nrows * sheet.ncols
            if cells_left < 0:
                raise PayloadTooLarge("the workbook has too many cells (empty ones included) to be read")
            builder.heading(1, sheet.name)
            builder.table([row for row in _xls_rows(book, sheet) if any(row)])
            book.unload_sheet(index)
        return builder.build()
    finally:
        book.release_resources()


def _open_xls(data: bytes) -> xlrd.Book:
    try:
        return xlrd.open_workbook(file_contents=data, on_demand=True, logfile=io.StringIO(), formatting_info=False)
    except XLRDError as exc:
        raise ParseFailed(f"the Excel 97–2003 (.xls) file cannot be read: {exc}") from exc
    except (*_OLE_ERRORS, AssertionError, ZeroDivisionError) as exc:
        raise ParseFailed("the Excel 97–2003 (.xls) file is damaged: its structure cannot be read") from exc


def _sheet(book: xlrd.Book, index: int) -> xlrd.sheet.Sheet:
    try:
        return book.sheet_by_index(index)
    except (XLRDError, *_OLE_ERRORS, AssertionError) as exc:
        raise ParseFailed(f"sheet {index + 1} of the Excel 97–2003 (.xls) file is damaged") from exc


def _xls_rows(book: xlrd.Book, sheet: xlrd.sheet.Sheet) -> list[list[str]]:
    return [[_xls_cell(book, cell) for cell in sheet.row(index)] for index in range(sheet.nrows)]


def _xls_cell(book: xlrd.Book, cell: xlrd.sheet.Cell) -> str:
    if cell.ctype == xlrd.XL_CELL_DATE:
        try:
            return cell_text(xlrd.xldate_as_datetime(float(cell.value), book.datemode))
        except (xlrd.xldate.XLDateError, OverflowError, ValueError):
            return cell_text(cell.value)
    if cell.ctype == xlrd.XL_CELL_BOOLEAN:
        return "TRUE" if cell.value else "FALSE"
    if cell.ctype in (xlrd.XL_CELL_ERROR, xlrd.XL_CELL_BLANK, xlrd.XL_CELL_EMPTY):
        return ""
    return cell_text(cell.value)
