"""Bytes → text: the decoding every text format shares, and plain text itself."""

from __future__ import annotations

import unicodedata

from ragkb_core.errors import ParseFailed
from ragkb_worker.parsers.model import ParsedDocument, ParseOptions, Section
from ragkb_worker.parsers.regulations import split_regulations

# Encodings tried in order: UTF-8 (with or without BOM) first; Shift_JIS (cp932) is common in Japanese offices.
_ENCODINGS = ("utf-8-sig", "cp932")
# Unicode categories that readable text almost never holds: controls, private use, unassigned, surrogates.
_NOT_TEXT = frozenset({"Cc", "Co", "Cn", "Cs"})


def decode_text(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return _check_text(_decode(data, "utf-16"))
    for encoding in _ENCODINGS:
        try:
            return _check_text(data.decode(encoding))
        except UnicodeDecodeError:
            continue
    raise ParseFailed("the text is neither UTF-8 nor Shift_JIS: it cannot be decoded")


def _check_text(text: str) -> str:
    """Shift_JIS decodes many binary byte runs into private-use characters: such text is not text."""
    suspicious = sum(1 for c in text if unicodedata.category(c) in _NOT_TEXT and c not in "\t\n\r\f")
    if suspicious > max(2, len(text) // 100):
        raise ParseFailed("the content is not text: it cannot be decoded into readable characters")
    # One line-break convention, so that every parser and the chunker only look for "\n".
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _decode(data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ParseFailed(f"the text is not valid {encoding}") from exc


def parse_plain_text(data: bytes, options: ParseOptions) -> ParsedDocument:
    text = decode_text(data)
    whole = [Section(heading_path=(), start=0, end=len(text))]
    return ParsedDocument(text=text, sections=split_regulations(text, whole))


def whole_text(data: bytes, options: ParseOptions) -> ParsedDocument:
    """The text as one section (XML, and any text whose structure is not worth a parser)."""
    text = decode_text(data)
    return ParsedDocument(text=text, sections=[Section(heading_path=(), start=0, end=len(text))])
