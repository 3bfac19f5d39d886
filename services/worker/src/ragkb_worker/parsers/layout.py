"""Reading order of a PDF page's text segments and tables: recursive XY cuts.

A region is cut at a vertical gutter when both sides read as columns of prose (several lines each, each side a
quarter of the region's width at least, lines of some length), so that a two-column page is read column after
column; otherwise at its widest horizontal gaps (the gap under a title, between paragraphs). A gutter between
short cells (a form's labels and values, a table without rules) is not a column break: such rows are read
across. Coordinates are PDF points, y growing upwards.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

# Of the widest horizontal gap, the share another gap needs to be cut at the same time (equal line gaps).
_SAME_GAP = 0.9
_MIN_COLUMN_BOXES = 3
_MIN_COLUMN_SHARE = 0.25
_MIN_COLUMN_LINE_CHARS = 12
# Two segments overlapping vertically by this share of the lower one are on one line.
_SAME_LINE = 0.5
# A vertical gap wider than the page's usual line gap by this many line heights starts a new block.
_BLOCK_GAP = 0.5
_MAX_DEPTH = 200
# Past this many segments on one page (glyphs placed one by one, a hostile page), cutting costs too much: the
# page is read line by line instead.
_MAX_CUT_BOXES = 4000


@dataclass(frozen=True)
class Box:
    left: float
    bottom: float
    right: float
    top: float
    text: str | None = None  # a text segment (one line, or part of one)
    rows: tuple[tuple[str, ...], ...] | None = None  # a table

    @property
    def height(self) -> float:
        return max(0.0, self.top - self.bottom)

    def holds_centre_of(self, other: Box) -> bool:
        x, y = (other.left + other.right) / 2, (other.bottom + other.top) / 2
        return self.left <= x <= self.right and self.bottom <= y <= self.top


def ordered_blocks(segments: list[Box], tables: list[Box]) -> list[Box]:
    """Tables and blocks of lines (text boxes whose text holds the lines) in reading order."""
    free = [s for s in segments if not any(t.holds_centre_of(s) for t in tables)]
    boxes = [*free, *tables]
    return _blocks(_order(boxes, 0) if len(boxes) <= _MAX_CUT_BOXES else _by_lines(boxes))


def _order(boxes: list[Box], depth: int) -> list[Box]:
    if len(boxes) < 2 or depth > _MAX_DEPTH:
        return _by_lines(boxes)
    columns = _column_cut(boxes)
    if columns is not None:
        return [box for side in columns for box in _order(side, depth + 1)]
    bands = _band_cut(boxes)
    if bands is not None:
        return [box for band in bands for box in _order(band, depth + 1)]
    return _by_lines(boxes)


def _by_lines(boxes: list[Box]) -> list[Box]:
    """Top to bottom, and left to right within a line (boxes of one line may differ a little in height)."""
    lines: list[list[Box]] = []
    for box in sorted(boxes, key=lambda b: -b.top):
        if lines and _same_line(lines[-1][0], box):
            lines[-1].append(box)
        else:
            lines.append([box])
    return [box for line in lines for box in sorted(line, key=lambda b: b.left)]


def _column_cut(boxes: list[Box]) -> tuple[list[Box], list[Box]] | None:
    """The widest vertical gutter both of whose sides read as prose columns, if any."""
    ordered = sorted(boxes, key=lambda b: b.left)
    width = max(b.right for b in boxes) - min(b.left for b in boxes)
    gutter = max(4.0, 0.5 * statistics.median(b.height for b in boxes))
    gaps: list[tuple[float, int]] = []
    reach = ordered[0].right
    for index, box in enumerate(ordered[1:], start=1):
        if box.left - reach >= gutter:
            gaps.append((box.left - reach, index))
        reach = max(reach, box.right)
    for _, index in sorted(gaps, reverse=True):
        left, right = ordered[:index], ordered[index:]
        if _is_column(left, width) and _is_column(right, width):
            return left, right
    return None


def _is_column(boxes: list[Box], region_width: float) -> bool:
    if len(boxes) < _MIN_COLUMN_BOXES:
        return False
    width = max(b.right for b in boxes) - min(b.left for b in boxes)
    lengths = [len(b.text) if b.text is not None else _MIN_COLUMN_LINE_CHARS for b in boxes]
    return width >= _MIN_COLUMN_SHARE * region_width and statistics.median(lengths) >= _MIN_COLUMN_LINE_CHARS


def _band_cut(boxes: list[Box]) -> list[list[Box]] | None:
    """The region cut at its widest horizontal gaps (and those nearly as wide), top to bottom."""
    ordered = sorted(boxes, key=lambda b: -b.top)
    gaps: list[tuple[float, int]] = []
    floor = ordered[0].bottom
    for index, box in enumerate(ordered[1:], start=1):
        if box.top < floor:
            gaps.append((floor - box.top, index))
        floor = min(floor, box.bottom)
    if not gaps:
        return None
    widest = max(gap for gap, _ in gaps)
    cuts = [index for gap, index in gaps if gap >= _SAME_GAP * widest]
    bounds = [0, *cuts, len(ordered)]
    return [ordered[a:b] for a, b in itertools.pairwise(bounds)]


def _blocks(ordered: list[Box]) -> list[Box]:
    """Consecutive text boxes joined into blocks of lines; a table, a jump upwards (the next column) or a gap
    wider than the page's usual line gap ends a block."""
    usual = _usual_gap(ordered)
    blocks: list[Box] = []
    current: list[Box] = []
    for box in ordered:
        if box.rows is not None:
            blocks.extend(_joined(current))
            blocks.append(box)
            current = []
        elif current and _breaks(current[-1], box, usual):
            blocks.extend(_joined(current))
            current = [box]
        else:
            current.append(box)
    blocks.extend(_joined(current))
    return blocks


def _usual_gap(ordered: list[Box]) -> float:
    gaps = [
        previous.bottom - box.top
        for previous, box in itertools.pairwise(ordered)
        if box.rows is None and previous.rows is None and not _same_line(previous, box) and box.top <= previous.top
    ]
    return statistics.median(gaps) if gaps else 0.0


def _breaks(previous: Box, box: Box, usual_gap: float) -> bool:
    if _same_line(previous, box):
        return False
    line = max(previous.height, box.height, 1.0)
    return box.top > previous.top or previous.bottom - box.top > usual_gap + _BLOCK_GAP * line


def _same_line(a: Box, b: Box) -> bool:
    overlap = min(a.top, b.top) - max(a.bottom, b.bottom)
    return overlap >= _SAME_LINE * max(1.0, min(a.height, b.height))


def _joined(boxes: list[Box]) -> list[Box]:
    if not boxes:
        return []
    text = boxes[0].text or ""
    for previous, box in itertools.pairwise(boxes):
        following = box.text or ""
        if not _same_line(previous, box):
            text += "\n" + following
        elif text and following and (is_wide(text[-1]) or is_wide(following[0])):
            text += following
        else:
            text += " " + following
    left = min(b.left for b in boxes)
    return [Box(left, min(b.bottom for b in boxes), max(b.right for b in boxes), max(b.top for b in boxes), text)]


def is_wide(char: str) -> bool:
    """CJK, kana and full-width characters (from the CJK radicals on): no space goes between runs of them."""
    return ord(char) >= _FIRST_WIDE


_FIRST_WIDE = 0x2E80
