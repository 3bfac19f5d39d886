"""What every parser returns (the document's text and its sections, spans of that text), and what it is given."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ragkb_core.settings import LimitSettings

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
    # What parsing found worth telling the operator (OCR pages and confidence, converted formats…): merged
    # into the document's ingest report.
    report: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class ParseOptions:
    """The limits a parser enforces and the KB's choices that change parsing."""

    limits: LimitSettings = field(default_factory=LimitSettings)
    ocr: bool = True
    # time.monotonic() past which OCR stops (set once per parse, so a mail's attachments share one budget).
    ocr_deadline: float | None = None
    # Called after each slow step (an OCR page, a conversion): the worker renews its claim on the document, whose
    # lease is shorter than an OCR budget.
    heartbeat: Callable[[], object] | None = None

    def with_deadline(self) -> ParseOptions:
        if self.ocr_deadline is not None:
            return self
        deadline = time.monotonic() + self.limits.ocr_time_budget_s
        return ParseOptions(self.limits, self.ocr, deadline, self.heartbeat)

    def beat(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat()
