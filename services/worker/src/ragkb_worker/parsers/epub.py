"""EPUB: the chapters of the spine in reading order, each read as HTML (headings give the heading path).

The container names the package file, the package file lists the chapters; every name is resolved inside the
archive (nothing outside it is ever read). A book whose chapters are encrypted (DRM) fails with that reason.
"""

from __future__ import annotations

import posixpath
import zipfile

from ragkb_core.errors import ParseFailed
from ragkb_worker.parsers.archive import check_whole_part, open_zip, parse_whole, read_member, require_member
from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.markup import read_html_into
from ragkb_worker.parsers.model import ParsedDocument, ParseOptions
from ragkb_worker.parsers.text import decode_text

KIND = "EPUB"
CONTAINER = "META-INF/container.xml"
ENCRYPTION = "META-INF/encryption.xml"
_CONTAINER_NS = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_OPF = "{http://www.idpf.org/2007/opf}"
_ENC = "{http://www.w3.org/2001/04/xmlenc#}"
_CHAPTER_TYPES = frozenset({"application/xhtml+xml", "text/html", "application/x-dtbook+xml"})


def parse_epub(data: bytes, options: ParseOptions) -> ParsedDocument:
    archive = open_zip(data, KIND, options.limits)
    require_member(archive, CONTAINER, KIND)
    package = _package_path(archive)
    chapters = _spine(archive, package)
    _refuse_encrypted(archive, chapters)
    builder = OutlineBuilder(options.limits.max_text_chars)
    for chapter in chapters:
        check_whole_part(archive, chapter, KIND)
        builder.reset_path([])
        read_html_into(builder, decode_text(read_member(archive, chapter, KIND)))
    return builder.build()


def _package_path(archive: zipfile.ZipFile) -> str:
    check_whole_part(archive, CONTAINER, KIND)
    root = parse_whole(read_member(archive, CONTAINER, KIND), KIND, CONTAINER)
    rootfile = root.find(f"{_CONTAINER_NS}rootfiles/{_CONTAINER_NS}rootfile")
    path = rootfile.get("full-path") if rootfile is not None else None
    if not path or path not in archive.namelist():
        raise ParseFailed("the EPUB is damaged: its container does not name a package file it holds")
    return path


def _spine(archive: zipfile.ZipFile, package: str) -> list[str]:
    """The chapters' member names in reading order."""
    check_whole_part(archive, package, KIND)
    root = parse_whole(read_member(archive, package, KIND), KIND, package)
    folder = posixpath.dirname(package)
    manifest = {
        item.get("id"): (item.get("href") or "", item.get("media-type") or "") for item in root.iter(f"{_OPF}item")
    }
    names = set(archive.namelist())
    chapters: list[str] = []
    for reference in root.iter(f"{_OPF}itemref"):
        href, media_type = manifest.get(reference.get("idref"), ("", ""))
        member = _member(folder, href)
        if media_type in _CHAPTER_TYPES and member in names and member not in chapters:
            chapters.append(member)
    if not chapters:
        raise ParseFailed("the EPUB has no readable chapter: its spine lists no (X)HTML document it holds")
    return chapters


def _member(folder: str, href: str) -> str:
    """An href of the package file as a member name; '' for anything that would leave the archive's root."""
    path = href.split("#", 1)[0]
    if not path or "://" in path or path.startswith("/"):
        return ""
    resolved = posixpath.normpath(posixpath.join(folder, path))
    return "" if resolved.startswith("..") else resolved


def _refuse_encrypted(archive: zipfile.ZipFile, chapters: list[str]) -> None:
    if ENCRYPTION not in archive.namelist():
        return
    check_whole_part(archive, ENCRYPTION, KIND)
    root = parse_whole(read_member(archive, ENCRYPTION, KIND), KIND, ENCRYPTION)
    encrypted = {_member("", ref.get("URI") or "") for ref in root.iter(f"{_ENC}CipherReference")}
    if encrypted & set(chapters):
        raise ParseFailed("the EPUB is DRM-protected: its chapters are encrypted")
