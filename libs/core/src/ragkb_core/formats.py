"""Which document formats ragkb accepts, and how an upload's real type is decided.

The api answers 415 for anything else at upload time; the worker picks its parser from the same media type.
Detection uses the standard library only (the api installs no parsing library): magic bytes for PDF, images
and RTF; the names of the zip entries (or the `mimetype` entry of OpenDocument and EPUB) in the first bytes for
zip-based files; the names of the streams of a compound file (legacy Office, Outlook) when its directory lies
in the first bytes; else the name, then the declared type. The worker checks the whole file again.
"""

from __future__ import annotations

import re
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
PNG = "image/png"
JPEG = "image/jpeg"
TIFF = "image/tiff"
WEBP = "image/webp"
DOC = "application/msword"
XLS = "application/vnd.ms-excel"
PPT = "application/vnd.ms-powerpoint"
RTF = "application/rtf"
ODT = "application/vnd.oasis.opendocument.text"
ODS = "application/vnd.oasis.opendocument.spreadsheet"
ODP = "application/vnd.oasis.opendocument.presentation"
EPUB = "application/epub+zip"
EML = "message/rfc822"
MSG = "application/vnd.ms-outlook"

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
    ".eml": EML,
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
# Formats recognised by their content (binary, or RTF's signature): the name alone never types them.
DOCUMENT_EXTENSIONS: dict[str, str] = {
    ".pdf": PDF,
    ".docx": DOCX,
    ".xlsx": XLSX,
    ".pptx": PPTX,
    ".png": PNG,
    ".jpg": JPEG,
    ".jpeg": JPEG,
    ".tif": TIFF,
    ".tiff": TIFF,
    ".webp": WEBP,
    ".doc": DOC,
    ".xls": XLS,
    ".ppt": PPT,
    ".msg": MSG,
    ".rtf": RTF,
    ".odt": ODT,
    ".ods": ODS,
    ".odp": ODP,
    ".epub": EPUB,
}
# extension → media type the worker parses it as.
EXTENSION_MEDIA_TYPES: dict[str, str] = {**TEXT_EXTENSIONS, **CODE_EXTENSIONS, **DOCUMENT_EXTENSIONS}
SUPPORTED_MEDIA_TYPES = frozenset(EXTENSION_MEDIA_TYPES.values())
CODE_MEDIA_TYPES = frozenset(CODE_EXTENSIONS.values())
OFFICE_MEDIA_TYPES_BY_SUFFIX = {".docx": DOCX, ".xlsx": XLSX, ".pptx": PPTX}
OFFICE_MEDIA_TYPES = frozenset(OFFICE_MEDIA_TYPES_BY_SUFFIX.values())
IMAGE_MEDIA_TYPES = frozenset({PNG, JPEG, TIFF, WEBP})
BINARY_MEDIA_TYPES = frozenset(DOCUMENT_EXTENSIONS.values())
# The zip-based formats that name themselves in a first, stored entry called `mimetype`.
_ZIP_MIMETYPES = {ODT: ODT, ODS: ODS, ODP: ODP, EPUB: EPUB}
ZIP_SUFFIXES = {".odt": ODT, ".ods": ODS, ".odp": ODP, ".epub": EPUB}
# Compound files (OLE2): the stream or storage name that tells each kind, as stored (UTF-16LE) in the directory.
_COMPOUND_FILE_MARKERS: tuple[tuple[str, str], ...] = (
    ("WordDocument", DOC),
    ("Workbook", XLS),
    ("Book", XLS),
    ("PowerPoint Document", PPT),
    ("__substg1.0_", MSG),
)
COMPOUND_FILE_SUFFIXES = {".doc": DOC, ".xls": XLS, ".ppt": PPT, ".msg": MSG}
# When the directory lies beyond the first bytes (LibreOffice writes it last), the first record of the main
# stream, which writers put in the first sectors, tells: Word's FIB (wIdent 0xA5EC), Excel's BIFF8 BOF record,
# PowerPoint's DocumentContainer record header.
_COMPOUND_STREAM_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\xec\xa5", DOC),
    (b"\x09\x08\x10\x00", XLS),
    (b"\x0f\x00\xe8\x03", PPT),
)
_COMPOUND_SECTOR = 512
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
    "text/rtf": RTF,
    "image/jpg": JPEG,
    "application/vnd.ms-outlook-msg": MSG,
}

_PDF_MAGIC = b"%PDF-"
_ZIP_MAGIC = b"PK\x03\x04"
_COMPOUND_FILE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_RTF_MAGIC = b"{\\rtf"
_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", PNG),
    (b"\xff\xd8\xff", JPEG),
    (b"II*\x00", TIFF),
    (b"MM\x00*", TIFF),
)
_ZIP_LOCAL_HEADER = struct.Struct("<4s2x2x2x2x2x4x4x4xHH")  # signature … name length, extra length
# The top folder of each Office format's parts inside its zip.
_OFFICE_PART_FOLDERS = {"word/": DOCX, "xl/": XLSX, "ppt/": PPTX}
_OOXML_MARKER = "[Content_Types].xml"
# Binary formats that are not supported, named so the 415 says what was sent.
_KNOWN_BINARY: tuple[tuple[bytes, str], ...] = (
    (b"GIF8", "a GIF image; convert it to PNG"),
    (b"\x00\x00\x01\x00", "an icon"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"Rar!", "a RAR archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"\x7fELF", "an executable"),
    (b"MZ", "an executable"),
)
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
# A nameless upload that opens with mail headers is a mail (lower-cased: the sniffer lower-cases the start).
_MAIL_HEADER = re.compile(
    rb"^(?:return-path|received|delivered-to|message-id|mime-version|from|date):[^\n]*\n(?:[\w-]+:|[ \t])"
)


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
    if head.startswith(_RTF_MAGIC):
        return RTF
    if head.startswith(_ZIP_MAGIC):
        return _zip_media_type(name, head, suffix)
    if head.startswith(_COMPOUND_FILE_MAGIC):
        return _compound_file_media_type(name, head, suffix)
    image = _image_media_type(head)
    if image is not None:
        return image
    for magic, what in _KNOWN_BINARY:
        if head.startswith(magic):
            raise _unsupported(name, f"its content is {what}")
    if _looks_binary(head):
        raise _unsupported(name, "its content is binary")
    return None


def _image_media_type(head: bytes) -> str | None:
    for magic, media_type in _IMAGE_MAGIC:
        if head.startswith(magic):
            return media_type
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return WEBP
    return None


def _zip_media_type(name: str, head: bytes, suffix: str) -> str:
    """OpenDocument and EPUB by their `mimetype` entry; else an Office Open XML file by its part folders."""
    declared = _zip_mimetype(head)
    if declared in _ZIP_MIMETYPES:
        return _ZIP_MIMETYPES[declared]
    names = zip_entry_names(head)
    if suffix in ZIP_SUFFIXES and (not names or names[0] == "mimetype"):
        return ZIP_SUFFIXES[suffix]
    return _office_media_type(name, head, suffix)


def _zip_mimetype(head: bytes) -> str | None:
    """The content of a first entry named `mimetype` stored uncompressed (as OpenDocument and EPUB require)."""
    if len(head) < _ZIP_LOCAL_HEADER.size:
        return None
    _, name_length, extra_length = _ZIP_LOCAL_HEADER.unpack_from(head, 0)
    start = _ZIP_LOCAL_HEADER.size
    if head[start : start + name_length] != b"mimetype":
        return None
    (compressed_size,) = struct.unpack_from("<I", head, 18)
    body = start + name_length + extra_length
    return head[body : body + min(compressed_size, 100)].decode("ascii", errors="replace").strip()


def _compound_file_media_type(name: str, head: bytes, suffix: str) -> str:
    """A legacy Office or Outlook file, told by the stream names in its directory when that lies in `head`."""
    if "EncryptedPackage".encode("utf-16-le") in head:
        raise _unsupported(name, "it is a password-protected Office file; remove the password and upload it again")
    for marker, media_type in _COMPOUND_FILE_MARKERS:
        if (marker + "\0").encode("utf-16-le") in head or (marker.endswith("_") and marker.encode("utf-16-le") in head):
            return media_type
    if suffix in COMPOUND_FILE_SUFFIXES:
        return COMPOUND_FILE_SUFFIXES[suffix]
    for offset in range(_COMPOUND_SECTOR, len(head), _COMPOUND_SECTOR):
        for signature, media_type in _COMPOUND_STREAM_SIGNATURES:
            if head.startswith(signature, offset):
                return media_type
    raise _unsupported(
        name, "it is a compound file whose kind cannot be told from its first bytes; name it .doc, .xls, .ppt or .msg"
    )


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
    raise _unsupported(
        name,
        "it is a zip archive, not a Word (.docx), Excel (.xlsx), PowerPoint (.pptx), OpenDocument (.odt, .ods, "
        ".odp) or EPUB file",
    )


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
    if base_declared in BINARY_MEDIA_TYPES:
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
    if _MAIL_HEADER.match(start):
        return EML
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
