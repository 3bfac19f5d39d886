"""Checks on an Office (OOXML) zip before any library unpacks it.

The api typed the upload from the zip entries in its first 8 KiB; here the whole central directory is read
(it sits at the end of the file) to confirm the format and to refuse zip bombs (ragkb_worker.parsers.archive).
"""

from __future__ import annotations

import re
import zipfile

from ragkb_core import formats
from ragkb_core.errors import PayloadTooLarge
from ragkb_core.settings import LimitSettings
from ragkb_worker.parsers.archive import open_zip, refuse_dtds, require_member

# The part each format cannot be without, and the format's name for messages.
MAIN_PARTS = {
    formats.DOCX: ("word/document.xml", "Word (.docx)"),
    formats.XLSX: ("xl/workbook.xml", "Excel (.xlsx)"),
    formats.PPTX: ("ppt/presentation.xml", "PowerPoint (.pptx)"),
}
_SLIDE_PART = re.compile(r"^ppt/slides/slide\d+\.xml$")


def check_office_archive(data: bytes, media_type: str, limits: LimitSettings) -> zipfile.ZipFile:
    """The archive, once it is known to be the right format and within the decompressed-size limit."""
    part, kind = MAIN_PARTS[media_type]
    archive = open_zip(data, kind, limits)
    require_member(archive, part, kind)
    refuse_dtds(archive, kind)
    return archive


def slide_count(archive: zipfile.ZipFile) -> int:
    return sum(1 for name in archive.namelist() if _SLIDE_PART.match(name))


def check_page_count(pages: int, what: str, limits: LimitSettings) -> None:
    if pages > limits.max_pages:
        raise PayloadTooLarge(
            f"the document has {pages} {what}, more than the limit of {limits.max_pages} (RAGKB_LIMITS__MAX_PAGES)"
        )
