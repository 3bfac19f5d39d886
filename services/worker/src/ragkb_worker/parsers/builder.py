"""Assemble a document's text block by block while recording its sections (used by the parsers of formats
whose text ragkb writes itself: PDF, Office, OpenDocument, HTML, EPUB, mail)."""

from __future__ import annotations

from collections.abc import Sequence

from ragkb_core.errors import PayloadTooLarge
from ragkb_worker.parsers.model import ParsedDocument, Section, SectionKind

# Blocks are separated by a blank line: the chunker packs paragraphs, so a block boundary is a good cut.
BLOCK_SEPARATOR = "\n\n"
CELL_SEPARATOR = " | "


class OutlineBuilder:
    """Text written in order; headings set the heading path of what follows them.

    A heading's own line is part of the text (it is what a reader sees) but not of the section under it:
    the heading path already carries it, and a chunk holding only the heading would say nothing.
    """

    def __init__(self, max_chars: int) -> None:
        self._parts: list[str] = []
        self._length = 0
        self._max_chars = max_chars
        self._path: list[tuple[int, str]] = []
        self._open: int | None = None
        self._page: int | None = None
        self.sections: list[Section] = []

    @property
    def heading_path(self) -> tuple[str, ...]:
        return tuple(title for _, title in self._path)

    def heading(self, level: int, title: str) -> None:
        """Start a section under `title` at `level` (smaller is higher; deeper headings are replaced)."""
        self._close()
        title = " ".join(title.split())
        self._write(title)
        self._path = [(lvl, t) for lvl, t in self._path if lvl < level] + [(level, title)]

    def reset_path(self, path: Sequence[str], page: int | None = None) -> None:
        """Start a section under an explicit path (a slide, a page, a sheet) without writing a heading line."""
        self._close()
        self._path = list(enumerate(path))
        self._page = page

    def block(self, text: str) -> None:
        if not text.strip():
            return
        start = self._write(text)
        if self._open is None:
            self._open = start

    def table(self, rows: Sequence[Sequence[str]]) -> None:
        """A table as one line per row; its first row is the header the chunker repeats."""
        lines = [render_row(row) for row in rows]
        lines = [line for line in lines if line.strip(" |")]
        if not lines:
            return
        self._close()
        start = self._write("\n".join(lines))
        header = lines[0] if len(lines) > 1 else None
        self._add(start, self._length, kind="table", header=header)

    def embed(self, parsed: ParsedDocument, path: Sequence[str]) -> None:
        """Another document's text as one block, its sections kept under `path` (a mail's attachment)."""
        self._close()
        if not parsed.text.strip():
            return
        start = self._write(parsed.text)
        prefix = tuple(path)
        for s in parsed.sections:
            self.sections.append(
                Section(prefix + s.heading_path, start + s.start, start + s.end, s.page, s.kind, s.header)
            )

    def build(self) -> ParsedDocument:
        self._close()
        return ParsedDocument("".join(self._parts), self.sections)

    def _close(self) -> None:
        if self._open is not None:
            self._add(self._open, self._length)
            self._open = None

    def _add(self, start: int, end: int, kind: SectionKind = "prose", header: str | None = None) -> None:
        self.sections.append(Section(self.heading_path, start, end, self._page, kind, header))

    def _write(self, text: str) -> int:
        """Append one block; return where it starts."""
        if self._parts:
            self._parts.append(BLOCK_SEPARATOR)
            self._length += len(BLOCK_SEPARATOR)
        start = self._length
        self._parts.append(text)
        self._length += len(text)
        if self._length > self._max_chars:
            raise PayloadTooLarge(f"the extracted text is longer than {self._max_chars} characters")
        return start


def render_row(cells: Sequence[str]) -> str:
    """One table row on one line: cells joined by a bar, line breaks inside a cell flattened."""
    flat = [" ".join(cell.split()) for cell in cells]
    while flat and not flat[-1]:
        flat.pop()
    return CELL_SEPARATOR.join(flat)
