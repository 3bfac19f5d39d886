"""Parsers: bytes of one media type → the document's text and its sections (heading path, page).

`parse` is the one entry point; each family of formats has its module under `ragkb_worker.parsers`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from ragkb_core import formats
from ragkb_core.errors import ParseFailed, UnsupportedMediaType
from ragkb_core.settings import LimitSettings
from ragkb_worker.parsers.code import code_parser
from ragkb_worker.parsers.epub import parse_epub
from ragkb_worker.parsers.excel import parse_xlsx
from ragkb_worker.parsers.image import parse_image
from ragkb_worker.parsers.legacy import parse_doc, parse_ppt, parse_rtf, parse_xls
from ragkb_worker.parsers.mail import parse_eml, parse_msg
from ragkb_worker.parsers.markdown import markdown_sections, parse_markdown
from ragkb_worker.parsers.markup import parse_html
from ragkb_worker.parsers.model import ParsedDocument, ParseOptions, Section, SectionKind
from ragkb_worker.parsers.opendocument import parse_odp, parse_ods, parse_odt
from ragkb_worker.parsers.pdf import parse_pdf
from ragkb_worker.parsers.powerpoint import parse_pptx
from ragkb_worker.parsers.structured import parse_delimited, parse_json, parse_yaml
from ragkb_worker.parsers.text import decode_text, parse_plain_text, whole_text
from ragkb_worker.parsers.word import parse_docx

__all__ = [
    "PARSERS",
    "ParseOptions",
    "ParsedDocument",
    "Parser",
    "Section",
    "SectionKind",
    "decode_text",
    "markdown_sections",
    "parse",
    "parse_markdown",
]

# Every parser receives the limits it must enforce (pages, unpacked size, text length) and the KB's choices.
Parser = Callable[[bytes, ParseOptions], ParsedDocument]


def _parse_part(media_type: str, data: bytes, options: ParseOptions) -> ParsedDocument:
    """A part of a container (a mail's attachment) by its own parser, within the container's options."""
    parser = PARSERS.get(media_type)
    if parser is None:
        raise UnsupportedMediaType(f"no parser for {media_type}")
    return _checked(parser(data, options))


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
    formats.PNG: parse_image,
    formats.JPEG: parse_image,
    formats.TIFF: parse_image,
    formats.WEBP: parse_image,
    formats.DOC: parse_doc,
    formats.XLS: parse_xls,
    formats.PPT: parse_ppt,
    formats.RTF: parse_rtf,
    formats.ODT: parse_odt,
    formats.ODS: parse_ods,
    formats.ODP: parse_odp,
    formats.EPUB: parse_epub,
    formats.EML: partial(parse_eml, parse_part=_parse_part),
    formats.MSG: partial(parse_msg, parse_part=_parse_part),
    **{media_type: code_parser(media_type) for media_type in formats.CODE_MEDIA_TYPES},
}


def parse(
    media_type: str,
    data: bytes,
    limits: LimitSettings | None = None,
    *,
    ocr: bool = True,
    heartbeat: Callable[[], object] | None = None,
) -> ParsedDocument:
    """Parse `data` as `media_type` within `limits` (the defaults when none are given); `ocr`: the KB's switch;
    `heartbeat`: called after each slow step (OCR of a page, a conversion)."""
    parser = PARSERS.get(media_type)
    if parser is None:
        raise UnsupportedMediaType(
            f"no parser for {media_type}", supported_media_types=sorted(formats.SUPPORTED_MEDIA_TYPES)
        )
    options = ParseOptions(limits or LimitSettings(), ocr=ocr, heartbeat=heartbeat).with_deadline()
    try:
        return _checked(parser(data, options))
    except RecursionError as exc:  # a mail of thousands of nested parts, XML nested past the stack
        raise ParseFailed("the document is nested too deeply to be read") from exc


def _checked(document: ParsedDocument) -> ParsedDocument:
    if not document.text.strip() or not document.sections:
        raise ParseFailed("the document contains no text")
    return document
