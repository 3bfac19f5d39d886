"""PowerPoint (.pptx): one section per slide (page = slide number) under the slide's title or "Slide N".

A slide's text is its title, then the other shapes' text and tables in their order on the slide, then the
speaker notes, which often say more than the slide.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator

import pptx
from pptx.shapes.autoshape import Shape
from pptx.shapes.base import BaseShape
from pptx.shapes.graphfrm import GraphicFrame
from pptx.shapes.group import GroupShape
from pptx.slide import Slide

from ragkb_core import formats
from ragkb_core.settings import LimitSettings
from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.model import ParsedDocument
from ragkb_worker.parsers.office import check_office_archive, check_page_count, slide_count


def parse_pptx(data: bytes, limits: LimitSettings) -> ParsedDocument:
    archive = check_office_archive(data, formats.PPTX, limits)
    check_page_count(slide_count(archive), "slides", limits)
    presentation = pptx.Presentation(io.BytesIO(data))
    builder = OutlineBuilder(limits.max_text_chars)
    for number, slide in enumerate(presentation.slides, start=1):
        _add_slide(builder, slide, number)
    return builder.build()


def _add_slide(builder: OutlineBuilder, slide: Slide, number: int) -> None:
    title_shape = slide.shapes.title
    title = " ".join(title_shape.text_frame.text.split()) if title_shape is not None else ""
    builder.reset_path([title or f"Slide {number}"], page=number)
    builder.block(title)
    for shape in _shapes(slide.shapes):
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            continue
        if isinstance(shape, Shape) and shape.has_text_frame:
            builder.block(shape.text_frame.text)
        elif isinstance(shape, GraphicFrame) and shape.has_table:
            builder.table([[cell.text for cell in row.cells] for row in shape.table.rows])
    if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
        builder.block(slide.notes_slide.notes_text_frame.text)


def _shapes(shapes: Iterable[BaseShape]) -> Iterator[BaseShape]:
    """Every shape, with the members of groups in place of the groups."""
    for shape in shapes:
        if isinstance(shape, GroupShape):
            yield from _shapes(shape.shapes)
        else:
            yield shape
