"""Which document formats ragkb accepts, and how an upload's real type is decided.

The api answers 415 for anything else at upload time; the worker picks its parser from the same media type.
Detection uses the standard library only (the api installs no parsing library): magic bytes for PDF, the
names of the zip entries in the first bytes for Office files, and the name or declared type for text.
"""

from __future__ import annotations

import struct
from pathlib import PurePath

from ragkb_core.errors import UnsupportedMediaType

MARKDOWN = "text/markdown"
PLAIN_TEXT = "text/plain"
CSV = "text/csv"
TSV = "text/tab-separated-values"
JSON = "application/json"
XML = "application/xml"
HTML = "text/html"
YAML = "application/yaml"
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"

# Source code: one media type per language, so the worker knows how to find its definitions.
JAVASCRIPT = "text/javascript"
JSX = "text/jsx"
TYPESCRIPT = "text/typescript"
TSX = "text/tsx"
PYTHON = "text/x-python"
JAVA = "text/x-java"
RUBY = "text/x-ruby"
GO = "text/x-go"
RUST = "text/x-rust"
C = "text/x-c"
CPP = "text/x-c++"
CSHARP = "text/x-csharp"
PHP = "text/x-php"
DART = "text/x-dart"
SQL = "application/sql"
SHELL = "application/x-sh"

TEXT_EXTENSIONS: dict[str, str] = {
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".txt": PLAIN_TEXT,
    ".text": PLAIN_TEXT,
    ".csv": CSV,
    ".tsv": TSV,
    ".json": JSON,
    ".xml": XML,
    ".html": HTML,
    ".htm": HTML,
    ".yaml": YAML,
    ".yml": YAML,
}
CODE_EXTENSIONS: dict[str, str] = {
    ".js": JAVASCRIPT,
    ".mjs": JAVASCRIPT,
    ".cjs": JAVASCRIPT,
    ".jsx": JSX,
    ".ts": TYPESCRIPT,
    ".tsx": TSX,
    ".py": PYTHON,
    ".java": JAVA,
    ".rb": RUBY,
    ".go": GO,
    ".rs": RUST,
    ".c": C,
    ".h": C,
    ".cpp": CPP,
    ".cc": CPP,
    ".hpp": CPP,
    ".cs": CSHARP,
    ".php": PHP,
    ".dart": DART,
    ".sql": SQL,
    ".sh": SHELL,
}
DOCUMENT_EXTENSIONS: dict[str, str] = {".pdf": PDF, ".docx": DOCX, ".xlsx": XLSX, ".pptx": PPTX}
# extension → media type the worker parses it as.
EXTENSION_MEDIA_TYPES: dict[str, str] = {**TEXT_EXTENSIONS, **CODE_EXTENSIONS, **DOCUMENT_EXTENSIONS}
SUPPORTED_MEDIA_TYPES = frozenset(EXTENSION_MEDIA_TYPES.values())
CODE_MEDIA_TYPES = frozenset(CODE_EXTENSIONS.values())
OFFICE_MEDIA_TYPES_BY_SUFFIX = {".docx": DOCX, ".xlsx": XLSX, ".pptx": PPTX}
OFFICE_MEDIA_TYPES = frozenset(OFFICE_MEDIA_TYPES_BY_SUFFIX.values())
# Declared types that clients commonly send for supported formats, beside the canonical ones above.
_DECLARED_ALIASES: dict[str, str] = {
    "text/xml": XML,
    "application/x-yaml": YAML,
    "text/yaml": YAML,
    "text/x-yaml": YAML,
    "application/javascript": JAVASCRIPT,
    "text/x-sh": SHELL,
    "text/x-shellscript": SHELL,
    "application/x-httpd-php": PHP,
    "text/x-markdown": MARKDOWN,
}

_PDF_MAGIC = b"%PDF-"
_ZIP_MAGIC = b"PK\x03\x04"
_ZIP_LOCAL_HEADER = struct.Struct("<4s2x2x2x2x2x4x4x4xHH")  # signature … name length, extra length
# The top folder of each Office format's parts inside its zip.
_OFFICE_PART_FOLDERS = {"word/": DOCX, "xl/": XLSX, "ppt/": PPTX}
_OOXML_MARKER = "[Content_Types].xml"
# Binary formats that are not supported, named so the 415 says what was sent.
_KNOWN_BINARY: tuple[tuple[bytes, str], ...] = (
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "a legacy Office (.doc/.xls/.ppt) file; save it as .docx/.xlsx/.pptx"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"\x00\x00\x01\x00", "an icon"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"Rar!", "a RAR archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"\x7fELF", "an executable"),
    (b"MZ", "an executable"),
)
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def detect_media_type(filename: str | None, head: bytes, declared: str | None = None) -> str:
    """Decide the media type from the content first, then the name, then the declared type.

    `head` is the first bytes of the upload (the api passes 8 KiB). A PDF or an Office zip is recognised
    by its content whatever its name; any other binary content is refused; text is typed by its name,
    then by the declared type, then by a look at its first characters.
    """
    name = filename or "upload"
    suffix = PurePath(filename).suffix.lower() if filename else ""
    binary_type = _binary_media_type(name, head, suffix)
    if binary_type is not None:
        return binary_type
    if suffix in DOCUMENT_EXTENSIONS:
        raise _unsupported(name, f"its name says {suffix} but its content is not a {suffix[1:].upper()} file")
    return _text_media_type(name, head, suffix, declared)


def _binary_media_type(name: str, head: bytes, suffix: str) -> str | None:
    """The type of a supported binary upload; None for text; 415 for any other binary content."""
    # Only at the very start (after whitespace): a text file may well mention "%PDF-" further in.
    if head.lstrip().startswith(_PDF_MAGIC):
        return PDF
    if head.startswith(_ZIP_MAGIC):
        return _office_media_type(name, head, suffix)
    for magic, what in _KNOWN_BINARY:
        if head.startswith(magic):
            raise _unsupported(name, f"its content is {what}")
    if _looks_binary(head):
        raise _unsupported(name, "its content is binary")
    return None


def _office_media_type(name: str, head: bytes, suffix: str) -> str:
    """Tell docx, xlsx and pptx apart by the names of the zip's entries that lie within `head`.

    Office writers put [Content_Types].xml and the format's folder (word/, xl/, ppt/) among the first
    entries. When `head` ends before any of them, the extension decides and the worker re-checks the
    whole archive (its central directory sits at the end, beyond `head`).
    """
    names = zip_entry_names(head)
    for folder, media_type in _OFFICE_PART_FOLDERS.items():
        if any(entry.startswith(folder) for entry in names):
            return media_type
    if suffix in OFFICE_MEDIA_TYPES_BY_SUFFIX and (_OOXML_MARKER in names or len(names) < 2):
        return OFFICE_MEDIA_TYPES_BY_SUFFIX[suffix]
    raise _unsupported(name, "it is a zip archive, not a Word (.docx), Excel (.xlsx) or PowerPoint (.pptx) file")


def zip_entry_names(head: bytes) -> list[str]:
    """Names from the zip local file headers found in `head`.

    It looks for every local header signature rather than walking entry sizes, because an entry written
    with a data descriptor records its size only after its data.
    """
    names: list[str] = []
    position = head.find(_ZIP_MAGIC)
    while position != -1 and position + _ZIP_LOCAL_HEADER.size <= len(head):
        _, name_length, _ = _ZIP_LOCAL_HEADER.unpack_from(head, position)
        start = position + _ZIP_LOCAL_HEADER.size
        raw = head[start : start + name_length]
        if len(raw) == name_length:
            names.append(raw.decode("utf-8", errors="replace"))
        position = head.find(_ZIP_MAGIC, position + 4)
    return names


def _text_media_type(name: str, head: bytes, suffix: str, declared: str | None) -> str:
    if suffix in EXTENSION_MEDIA_TYPES:
        return EXTENSION_MEDIA_TYPES[suffix]
    base_declared = (declared or "").split(";")[0].strip().lower()
    base_declared = _DECLARED_ALIASES.get(base_declared, base_declared)
    if base_declared in OFFICE_MEDIA_TYPES | {PDF}:
        raise _unsupported(name, f"it is declared as {base_declared} but its content is text")
    if base_declared in SUPPORTED_MEDIA_TYPES:
        return base_declared
    if not suffix and base_declared in ("", "application/octet-stream", PLAIN_TEXT):
        return _sniff_text(head)
    raise _unsupported(name, f"type {suffix or base_declared!r} is not supported")


def _sniff_text(head: bytes) -> str:
    """Type a nameless text upload by its first characters; plain text when nothing stands out."""
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:256].lower()
    if start.startswith((b"<!doctype html", b"<html")):
        return HTML
    if start.startswith(b"<?xml"):
        return XML
    return PLAIN_TEXT


def _looks_binary(head: bytes) -> bool:
    # UTF-16 text holds NUL bytes by design: its byte order mark says it is text.
    return not head.startswith(_UTF16_BOMS) and b"\x00" in head


def _unsupported(name: str, reason: str) -> UnsupportedMediaType:
    return UnsupportedMediaType(
        f"{name}: {reason}",
        supported_extensions=sorted(EXTENSION_MEDIA_TYPES),
        supported_media_types=sorted(SUPPORTED_MEDIA_TYPES),
    )
