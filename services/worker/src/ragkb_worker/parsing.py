"""Parsers: bytes of one media type → the document's text and its sections (heading path, page).

`parse` is the one entry point; each family of formats has its module under `ragkb_worker.parsers`.
"""

from __future__ import annotations

from collections.abc import Callable

from ragkb_core import formats
from ragkb_core.errors import ParseFailed, UnsupportedMediaType
from ragkb_core.settings import LimitSettings
from ragkb_worker.parsers.code import code_parser
from ragkb_worker.parsers.excel import parse_xlsx
from ragkb_worker.parsers.markdown import markdown_sections, parse_markdown
from ragkb_worker.parsers.markup import parse_html
from ragkb_worker.parsers.model import ParsedDocument, Section, SectionKind
from ragkb_worker.parsers.pdf import parse_pdf
from ragkb_worker.parsers.powerpoint import parse_pptx
from ragkb_worker.parsers.structured import parse_delimited, parse_json, parse_yaml
from ragkb_worker.parsers.text import decode_text, parse_plain_text, whole_text
from ragkb_worker.parsers.word import parse_docx

__all__ = [
    "PARSERS",
    "ParsedDocument",
    "Parser",
    "Section",
    "SectionKind",
    "decode_text",
    "markdown_sections",
    "parse",
    "parse_markdown",
]

# Every parser receives the limits it must enforce (pages, unpacked size, text length).
Parser = Callable[[bytes, LimitSettings], ParsedDocument]

PARSERS: dict[str, Parser] = {
    formats.PLAIN_TEXT: parse_plain_text,
    formats.MARKDOWN: parse_markdown,
    formats.CSV: parse_delimited,
    formats.TSV: parse_delimited,
    formats.JSON: parse_json,
    formats.YAML: parse_yaml,
    formats.XML: whole_text,
    formats.HTML: parse_html,
    formats.PDF: parse_pdf,
    formats.DOCX: parse_docx,
    formats.XLSX: parse_xlsx,
    formats.PPTX: parse_pptx,
    **{media_type: code_parser(media_type) for media_type in formats.CODE_MEDIA_TYPES},
}


def parse(media_type: str, data: bytes, limits: LimitSettings | None = None) -> ParsedDocument:
    """Parse `data` as `media_type` within `limits` (the defaults when none are given)."""
    parser = PARSERS.get(media_type)
    if parser is None:
        raise UnsupportedMediaType(
            f"no parser for {media_type}", supported_media_types=sorted(formats.SUPPORTED_MEDIA_TYPES)
        )
    document = parser(data, limits or LimitSettings())
    if not document.text.strip() or not document.sections:
        raise ParseFailed("the document contains no text")
    return document
