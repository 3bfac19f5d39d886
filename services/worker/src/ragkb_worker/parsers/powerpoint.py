"""PowerPoint (.pptx): one section per slide (page = slide number) under the slide's title or "Slide N".

A slide's text is its title, then the other shapes' text and tables in their order on the slide, then the
speaker notes, which often say more than the slide. python-pptx builds each part as a tree, so every XML part
is first checked against the size of a part read whole.
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
from ragkb_worker.parsers.archive import check_whole_part, library_errors
from ragkb_worker.parsers.builder import OutlineBuilder
from ragkb_worker.parsers.model import ParsedDocument, ParseOptions
from ragkb_worker.parsers.office import MAIN_PARTS, check_office_archive, check_page_count, slide_count

KIND = MAIN_PARTS[formats.PPTX][1]
# The parts python-pptx parses into trees when the slides are read.
_TREE_PARTS = ("ppt/presentation.xml", "ppt/slides/", "ppt/notesSlides/", "ppt/slideLayouts/", "ppt/slideMasters/")


def parse_pptx(data: bytes, options: ParseOptions) -> ParsedDocument:
    archive = check_office_archive(data, formats.PPTX, options.limits)
    check_page_count(slide_count(archive), "slides", options.limits)
    for name in archive.namelist():
        if name.endswith(".xml") and name.startswith(_TREE_PARTS):
            check_whole_part(archive, name, KIND)
    builder = OutlineBuilder(options.limits.max_text_chars)
    with library_errors(KIND):
        presentation = pptx.Presentation(io.BytesIO(data))
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
