"""Word (.docx): paragraphs and tables in reading order; Title and Heading 1..n styles give the heading path."""

from __future__ import annotations

import io
import re

import docx
from docx.enum.style import WD_STYLE_TYPE
from docx.styles.styles import Styles
from docx.table import Table
from docx.text.paragraph import Paragraph

from ragkb_core import formats
from ragkb_core.settings import LimitSettings
from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.model import ParsedDocument
from ragkb_worker.parsers.office import check_office_archive
from ragkb_worker.parsers.regulations import split_regulations

# Built-in heading styles by their English names (Word stores those whatever the interface language).
_HEADING_STYLE = re.compile(r"^(?:heading|見出し)\s*(\d)$", re.IGNORECASE)
_TITLE_STYLES = frozenset({"title", "表題"})


def parse_docx(data: bytes, limits: LimitSettings) -> ParsedDocument:
    check_office_archive(data, formats.DOCX, limits)
    document = docx.Document(io.BytesIO(data))
    levels = _heading_levels(document.styles)
    builder = OutlineBuilder(limits.max_text_chars)
    for block in document.iter_inner_content():
        if isinstance(block, Paragraph):
            _add_paragraph(builder, block, levels)
        else:
            builder.table(_table_rows(block))
    parsed = builder.build()
    return ParsedDocument(parsed.text, split_regulations(parsed.text, parsed.sections))


def _heading_levels(styles: Styles) -> dict[str, int]:
    """Style id → heading level, for the heading styles of this document.

    Looked up once: `Paragraph.style` resolves the style anew on every call by scanning all styles, which
    made it most of the parsing time."""
    levels = {style.style_id: heading_level(style.name) for style in styles if style.type == WD_STYLE_TYPE.PARAGRAPH}
    return {style_id: level for style_id, level in levels.items() if level is not None}


def _add_paragraph(builder: OutlineBuilder, paragraph: Paragraph, levels: dict[str, int]) -> None:
    # The paragraph's style id, read from its XML (None: the default style, which is body text).
    style_id = paragraph._p.style
    level = levels.get(style_id) if style_id is not None else None
    if level is not None and paragraph.text.strip():
        builder.heading(level, paragraph.text)
    else:
        builder.block(paragraph.text)


def heading_level(style_name: str | None) -> int | None:
    """0 for the Title style, n for Heading n, None for body text."""
    name = (style_name or "").strip()
    if name.lower() in _TITLE_STYLES:
        return 0
    match = _HEADING_STYLE.match(name)
    return int(match.group(1)) if match else None


def _table_rows(table: Table) -> list[list[str]]:
    rows: list[list[str]] = []
    for row in table.rows:
        cells = row.cells
        # A merged cell is returned once per grid column it spans (the same underlying element): keep it once.
        rows.append([cell.text for i, cell in enumerate(cells) if i == 0 or cell._tc is not cells[i - 1]._tc])
    return rows
