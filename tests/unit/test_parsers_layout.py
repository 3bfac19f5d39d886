"""Reading order of positioned text (ragkb_worker.parsers.layout): columns one after the other, rows of a form
or a borderless table across, tables in place, and a bounded cost for pages of scattered glyphs."""

from __future__ import annotations

import random

import pytest

from ragkb_worker.parsers.layout import Box, ordered_blocks


def line(x: float, y: float, text: str, height: float = 10, char_width: float = 5) -> Box:
    return Box(x, y, x + char_width * len(text), y + height, text=text)


def texts(blocks: list[Box]) -> list[str]:
    return [block.text or "" if block.rows is None else "TABLE" for block in blocks]


LEFT = [
    "The left column starts here and talks",
    "about the Orion budget, reviewed by",
    "the finance committee every quarter.",
]
RIGHT = [
    "The right column is about parking and",
    "permits that cost 35 euros a month,",
    "sold by the facilities desk downstairs.",
]


def test_two_columns_under_a_title_are_read_column_after_column() -> None:
    boxes = [line(50, 780, "Facilities newsletter", height=14)]
    for row, (a, b) in enumerate(zip(LEFT, RIGHT, strict=True)):
        boxes += [line(50, 740 - 14 * row, a), line(320, 740 - 14 * row, b)]
    assert texts(ordered_blocks(boxes, [])) == ["Facilities newsletter", "\n".join(LEFT), "\n".join(RIGHT)]


def test_a_form_of_short_labels_and_values_is_read_row_by_row() -> None:
    rows = [("Name:", "Hanako Sato"), ("Department:", "Sales"), ("Hotel:", "12,000 yen"), ("Train:", "Reserved")]
    boxes = [box for n, (a, b) in enumerate(rows) for box in (line(50, 700 - 16 * n, a), line(200, 700 - 16 * n, b))]
    assert texts(ordered_blocks(boxes, [])) == [
        "Name: Hanako Sato\nDepartment: Sales\nHotel: 12,000 yen\nTrain: Reserved"
    ]


def test_a_table_stands_where_it_is_and_the_text_inside_it_is_not_repeated() -> None:
    table = Box(50, 500, 400, 600, rows=(("Item", "Price"), ("Lamp", "7 euros")))
    boxes = [
        line(50, 650, "Before the table."),
        line(60, 580, "Item"),
        line(60, 520, "Lamp"),
        line(50, 450, "After it."),
    ]
    assert texts(ordered_blocks(boxes, [table])) == ["Before the table.", "TABLE", "After it."]


def test_japanese_runs_on_one_line_are_joined_without_a_space() -> None:
    boxes = [line(50, 700, "宿泊費の上限は"), line(86, 700, "一泊一万二千円")]
    assert texts(ordered_blocks(boxes, [])) == ["宿泊費の上限は一泊一万二千円"]


@pytest.mark.timeout(20)
def test_a_page_of_scattered_glyphs_is_read_in_bounded_time() -> None:
    scatter = random.Random(7)
    boxes = [line(scatter.uniform(0, 600), scatter.uniform(0, 800), "x", height=3) for _ in range(20_000)]
    assert len("".join(texts(ordered_blocks(boxes, [])))) >= 20_000
