"""Zip containers (Office Open XML, OpenDocument, EPUB) read within limits, and their XML streamed safely.

The whole central directory is read before anything is inflated: the members' declared uncompressed sizes are
summed and refused over the decompressed-size limit (zip bombs). Python's zipfile never inflates a member past
its declared size; a member that holds more than it declares (a lying size) fails its CRC check, which is
reported as damage, as are truncated members and malformed XML. XML is parsed without resolving entities,
loading DTDs or touching the network, so entity expansion bombs and external entities do nothing.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO
from xml.etree.ElementTree import ParseError

from lxml import etree

from ragkb_core.errors import ParseFailed, PayloadTooLarge
from ragkb_core.settings import LimitSettings

# Parts that a library loads whole into a tree (a slide, a workbook's styles, an EPUB's package file) must be
# smaller than this: a tree costs ~15 times its XML in memory, so a 190 MB part cost a worker 3 GB.
# Parts that are streamed (a Word body, a sheet, OpenDocument content) are bounded by the text limit instead.
MAX_WHOLE_PART_BYTES = 32 * 1024 * 1024
# Parse events a streamed part may yield per character of the text limit. Real documents yield well under one
# (a paragraph of 100 characters in five runs: about 14); a table of one-letter cells about 8.
EVENTS_PER_TEXT_CHAR = 8
# How much of each XML part is looked at for a DTD declaration (it can only be in the prolog).
_PROLOG_BYTES = 4096
# Errors of a member that is truncated, corrupt or larger than its recorded size.
_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, OSError)


def open_zip(data: bytes, kind: str, limits: LimitSettings) -> zipfile.ZipFile:
    """The archive, once its directory is readable and its members fit the decompressed-size limit."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ParseFailed(f"the file is not a valid {kind} file: its zip archive is damaged or truncated") from exc
    unpacked = sum(member.file_size for member in archive.infolist())
    if unpacked > limits.max_decompressed_bytes:
        raise PayloadTooLarge(
            f"the {kind} file would unpack to {unpacked} bytes, more than the limit of "
            f"{limits.max_decompressed_bytes} bytes (RAGKB_LIMITS__MAX_DECOMPRESSED_BYTES)"
        )
    return archive


def refuse_dtds(archive: zipfile.ZipFile, kind: str) -> None:
    """Refuse XML parts that declare a DTD: Office and OpenDocument files never do, and entity declarations are
    how entity-expansion ("billion laughs") and external-entity attacks are written. A DTD must come before
    the root element, so each part's first bytes tell."""
    for name in archive.namelist():
        if not name.endswith((".xml", ".rels")):
            continue
        with member_errors(kind, name), archive.open(name) as stream:
            head = stream.read(_PROLOG_BYTES)
        if b"<!DOCTYPE" in head or b"<!ENTITY" in head:
            raise ParseFailed(
                f"the {kind} file's part {name} declares a DTD (<!DOCTYPE>/<!ENTITY>), which {kind} files never "
                "do: refused as an entity-expansion attack"
            )


def require_member(archive: zipfile.ZipFile, name: str, kind: str) -> None:
    if name not in archive.namelist():
        raise ParseFailed(f"the zip archive has no {name}: it is not a {kind} file")


def check_whole_part(archive: zipfile.ZipFile, name: str, kind: str) -> None:
    """Refuse a part that would be loaded whole when it is larger than MAX_WHOLE_PART_BYTES."""
    size = archive.getinfo(name).file_size
    if size > MAX_WHOLE_PART_BYTES:
        raise PayloadTooLarge(
            f"the {kind} file's part {name} is {size} bytes of XML, more than the {MAX_WHOLE_PART_BYTES} bytes "
            "ragkb reads as one piece"
        )


def read_member(archive: zipfile.ZipFile, name: str, kind: str) -> bytes:
    with member_errors(kind, name):
        return archive.read(name)


@contextmanager
def member_errors(kind: str, name: str) -> Iterator[None]:
    """Turn what a damaged member or malformed XML raises into a reason the user can act on."""
    try:
        yield
    except _DAMAGE as exc:
        raise ParseFailed(
            f"the {kind} file is damaged: its part {name} is truncated, corrupt or larger than its recorded size"
        ) from exc
    except etree.XMLSyntaxError as exc:
        raise ParseFailed(f"the {kind} file is damaged: its part {name} is not well-formed XML ({exc.msg})") from exc


def iterparse(
    source: IO[bytes], tags: tuple[str, ...], events: tuple[str, ...] = ("end",), *, max_text_chars: int
) -> Iterator[tuple[str, etree._Element]]:
    """Stream the elements named by `tags` (Clark notation) from `source`, each cleared once handled.

    Nothing is kept: after each event the element's earlier siblings are dropped, so memory stays that of the
    current element's ancestors, however long the part is. Time is bounded too: a part may yield at most
    EVENTS_PER_TEXT_CHAR events per character of the text limit (a body of millions of empty paragraphs holds
    no text, so the text limit alone would not stop it)."""
    budget = EVENTS_PER_TEXT_CHAR * max_text_chars
    parser = etree.iterparse(
        source,
        events=events,
        tag=tags,
        resolve_entities=False,
        load_dtd=False,
        no_network=True,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    for event, element in parser:
        budget -= 1
        if budget < 0:
            raise PayloadTooLarge(
                f"the part holds more than {EVENTS_PER_TEXT_CHAR} elements per character of the text limit "
                f"({max_text_chars}, RAGKB_LIMITS__MAX_TEXT_CHARS): empty paragraphs, runs or cells by the million"
            )
        yield event, element
        if event == "end":
            _forget(element)


def _forget(element: etree._Element) -> None:
    element.clear(keep_tail=True)  # type: ignore[call-arg]  # lxml-stubs lag behind lxml's signature
    parent = element.getparent()
    while parent is not None and element.getprevious() is not None:
        del parent[0]


@contextmanager
def streamed_member(archive: zipfile.ZipFile, name: str, kind: str) -> Iterator[IO[bytes]]:
    with member_errors(kind, name), archive.open(name) as stream:
        yield stream


def parse_whole(data: bytes, kind: str, name: str) -> etree._Element:
    """A small part (a manifest, a package file) as a tree, parsed with the same safe settings."""
    parser = etree.XMLParser(
        resolve_entities=False, load_dtd=False, no_network=True, huge_tree=False, remove_comments=True
    )
    with member_errors(kind, name):
        root = etree.fromstring(data, parser)
    if root is None:
        raise ParseFailed(f"the {kind} file is damaged: its part {name} is empty")
    return root


@contextmanager
def library_errors(kind: str) -> Iterator[None]:
    """What a parsing library (openpyxl, python-pptx) raises on a damaged file, as a reason: they read the
    members and their XML themselves."""
    try:
        yield
    except _DAMAGE as exc:
        raise ParseFailed(f"the {kind} file is damaged: a part is truncated, corrupt or larger than recorded") from exc
    except (ParseError, etree.XMLSyntaxError) as exc:
        raise ParseFailed(f"the {kind} file is damaged: a part is not well-formed XML ({exc})") from exc
    except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
        raise ParseFailed(f"the {kind} file is damaged or has a structure ragkb cannot read ({exc})") from exc
