"""Checks on an Office (OOXML) zip before any library unpacks it.

The api typed the upload from the zip entries in its first 8 KiB; here the whole central directory is read
(it sits at the end of the file) to confirm the format and to refuse zip bombs: the members' declared
uncompressed sizes are summed BEFORE anything is inflated. Python's zipfile never inflates a member past
its declared size, so the sum bounds what the Office libraries can unpack afterwards.
"""

from __future__ import annotations

import io
import re
import zipfile

from ragkb_core import formats
from ragkb_core.errors import ParseFailed, PayloadTooLarge
from ragkb_core.settings import LimitSettings

# The part each format cannot be without, and the format's name for messages.
_MAIN_PARTS = {
    formats.DOCX: ("word/document.xml", "Word (.docx)"),
    formats.XLSX: ("xl/workbook.xml", "Excel (.xlsx)"),
    formats.PPTX: ("ppt/presentation.xml", "PowerPoint (.pptx)"),
}
_SLIDE_PART = re.compile(r"^ppt/slides/slide\d+\.xml$")


def check_office_archive(data: bytes, media_type: str, limits: LimitSettings) -> zipfile.ZipFile:
    """The archive, once it is known to be the right format and within the decompressed-size limit."""
    part, kind = _MAIN_PARTS[media_type]
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ParseFailed(f"the file is not a valid {kind} file: its zip archive is damaged or truncated") from exc
    if part not in archive.namelist():
        raise ParseFailed(f"the zip archive has no {part}: it is not a {kind} file")
    unpacked = sum(member.file_size for member in archive.infolist())
    if unpacked > limits.max_decompressed_bytes:
        raise PayloadTooLarge(
            f"the {kind} file would unpack to {unpacked} bytes, more than the limit of "
            f"{limits.max_decompressed_bytes} bytes (RAGKB_LIMITS__MAX_DECOMPRESSED_BYTES)"
        )
    return archive


def slide_count(archive: zipfile.ZipFile) -> int:
    return sum(1 for name in archive.namelist() if _SLIDE_PART.match(name))


def check_page_count(pages: int, what: str, limits: LimitSettings) -> None:
    if pages > limits.max_pages:
        raise PayloadTooLarge(
            f"the document has {pages} {what}, more than the limit of {limits.max_pages} (RAGKB_LIMITS__MAX_PAGES)"
        )
