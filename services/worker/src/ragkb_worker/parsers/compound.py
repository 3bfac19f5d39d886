"""Compound files (OLE2: legacy Office, Outlook .msg), opened with olefile from bytes in memory."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import olefile

if TYPE_CHECKING:
    # Entry names are str: olefile decodes the directory's UTF-16 names (its stubs type them by the input's type).
    CompoundFile: TypeAlias = olefile.OleFileIO[str]
else:
    CompoundFile = olefile.OleFileIO


def open_compound_file(data: bytes) -> CompoundFile:
    # Strict about structural defects (sectors past the end of a truncated file, broken chains), which olefile
    # otherwise only logs while it reads zeros in their place.
    compound: CompoundFile = olefile.OleFileIO(data, raise_defects=olefile.DEFECT_INCORRECT)  # type: ignore[arg-type]
    return compound
