"""What every parser returns: the document's text and its sections, spans of that text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# How the chunker cuts a section: prose at paragraphs then sentences, code at blank lines then lines,
# a table at rows (so that a row is never split while it fits).
SectionKind = Literal["prose", "code", "table"]


@dataclass(frozen=True)
class Section:
    """A span [start, end) of the document text under one heading path, on one page."""

    heading_path: tuple[str, ...]
    start: int
    end: int
    page: int | None = None
    kind: SectionKind = "prose"
    # Text the chunker repeats at the top of every chunk of this section after the first: a table's header
    # row, so that each chunk of a long table still says what its columns are. The span itself starts with it.
    header: str | None = None


@dataclass(frozen=True)
class ParsedDocument:
    text: str
    sections: list[Section]
