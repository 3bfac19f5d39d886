"""Structure-aware chunking: repeated table headers, dropped heading-only and noise lines, code cut at
lines, and the chunk-count limit. A whitespace tokenizer stands in for the model's."""

from __future__ import annotations

import re

import pytest

from ragkb_core import formats
from ragkb_core.errors import PayloadTooLarge
from ragkb_core.kb_settings import KbChunking
from ragkb_core.settings import LimitSettings
from ragkb_worker.chunking import Chunker, drop_reason, remove_noise_lines
from ragkb_worker.parsing import ParsedDocument, Section, parse


class WordTokenizer:
    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def chunker(target: int = 20, maximum: int = 30, overlap: int = 0, max_chunks: int = 20_000) -> Chunker:
    settings = KbChunking(target_tokens=target, max_tokens=maximum, overlap_tokens=overlap)
    return Chunker(WordTokenizer(), settings, LimitSettings(max_chunks=max_chunks))


HEADER = "name, team, days"
CSV = HEADER + "\n" + "".join(f"person{n}, team{n % 3}, {n}\n" for n in range(30))


def test_every_chunk_of_a_table_starts_with_its_header_row() -> None:
    document = parse(formats.CSV, CSV.encode())
    chunks, _ = chunker(target=16, maximum=24, overlap=8).chunk(document)
    assert len(chunks) > 2
    assert all(c.text.startswith(HEADER + "\n") for c in chunks)
    # The first chunk is a verbatim slice; the others are the header, then a verbatim slice of rows.
    assert chunks[0].text == CSV[chunks[0].char_start : chunks[0].char_end]
    for chunk in chunks[1:]:
        assert chunk.text == HEADER + "\n" + CSV[chunk.char_start : chunk.char_end]
        assert chunk.tokens == len(chunk.text.split()) <= 16


def test_table_rows_are_neither_split_nor_repeated() -> None:
    chunks, _ = chunker(target=16, maximum=24, overlap=8).chunk(parse(formats.CSV, CSV.encode()))
    body_rows = [line for c in chunks for line in c.text.split("\n") if line != HEADER]
    assert body_rows == CSV.strip().split("\n")[1:]


def test_a_header_wider_than_half_the_target_is_not_repeated() -> None:
    header = ", ".join(f"column{i}" for i in range(12))
    text = header + "\n" + "".join(", ".join("v" for _ in range(12)) + "\n" for _ in range(6))
    chunks, _ = chunker(target=20, maximum=30).chunk(parse(formats.CSV, text.encode()))
    assert all(not c.text.startswith(header) for c in chunks[1:])


def test_markdown_table_chunks_repeat_header_and_delimiter() -> None:
    rows = "".join(f"| plan{n} | {n} days |\n" for n in range(12))
    document = parse(formats.MARKDOWN, f"# Plans\n\n| Plan | Leave |\n|---|---|\n{rows}".encode())
    chunks, _ = chunker(target=16, maximum=20).chunk(document)
    assert len(chunks) > 1
    assert all(c.text.startswith("| Plan | Leave |\n|---|---|\n") for c in chunks)
    assert all(c.heading_path == ("Plans",) for c in chunks)


def test_chunks_holding_only_their_heading_are_dropped_and_counted() -> None:
    text = "第1章　総則\n\n第1条（目的）\nこの規則は就業の事項を定める。\n\n第2条（定義）\n従業員とは社員をいう。\n"
    chunks, report = chunker().chunk(parse(formats.PLAIN_TEXT, text.encode()))
    assert [c.heading_path[-1] for c in chunks] == ["第1条（目的）", "第2条（定義）"]
    assert report.dropped["heading_only"] == 1
    assert report.chunks == 2


@pytest.mark.parametrize(
    ("chunk", "path", "reason"),
    [
        ("ＡＢＣ（概要）", ("Guide", "ABC 概要"), "heading_only"),
        ("## Install!", ("Guide", "Install"), "heading_only"),
        ("Guide — Install", ("Guide", "Install"), "heading_only"),
        ("- - -", ("Guide",), "empty"),
        ("Install it with apt.", ("Guide", "Install"), None),
        ("Install", (), None),
    ],
)
def test_drop_reason(chunk: str, path: tuple[str, ...], reason: str | None) -> None:
    assert drop_reason(chunk, path) == reason


NOISY = "Intro line one.\nCONFIDENTIAL\nMore intro.\n\nPage 3\nSecond paragraph here.\n"


def test_noise_lines_are_removed_before_chunking_and_counted() -> None:
    patterns = [re.compile(r"^CONFIDENTIAL$"), re.compile(r"^Page \d+$")]
    chunks, report = chunker().chunk(parse(formats.PLAIN_TEXT, NOISY.encode()), noise_patterns=patterns)
    assert [c.text for c in chunks] == ["Intro line one.\nMore intro.\n\nSecond paragraph here."]
    assert report.dropped["noise"] == 2


def test_removing_noise_keeps_sections_on_their_text() -> None:
    text = "keep a\nNOISE\nkeep b\nNOISE\nkeep c\n"
    split = text.index("keep b") + len("keep b")
    document = ParsedDocument(text, [Section(("A",), 0, split), Section(("B",), split, len(text))])
    cleaned, removed = remove_noise_lines(document, [re.compile("NOISE")])
    assert removed == 2
    assert cleaned.text == "keep a\nkeep b\nkeep c\n"
    assert [cleaned.text[s.start : s.end] for s in cleaned.sections] == ["keep a\nkeep b", "\nkeep c\n"]


def test_without_noise_patterns_nothing_is_counted() -> None:
    _, report = chunker().chunk(parse(formats.PLAIN_TEXT, NOISY.encode()))
    assert "noise" not in report.dropped


def test_code_over_the_target_is_cut_at_lines_not_at_dots() -> None:
    body = "\n".join(f"    value{n} = config.section.key{n}" for n in range(12))
    source = f"def load(config):\n{body}\n    return value0\n"
    chunks, _ = chunker(target=16, maximum=20).chunk(parse(formats.PYTHON, source.encode()))
    assert len(chunks) > 1
    lines = [line.strip() for line in source.split("\n")]
    for chunk in chunks:
        assert chunk.heading_path == ("load",)
        assert all(line.strip() in lines for line in chunk.text.split("\n"))


def test_too_many_chunks_fail_with_the_limit() -> None:
    text = "\n\n".join(f"paragraph {n} " + "word " * 25 for n in range(10))
    with pytest.raises(PayloadTooLarge, match=r"more than 5 chunks.*MAX_CHUNKS"):
        chunker(target=20, maximum=30, max_chunks=5).chunk(parse(formats.PLAIN_TEXT, text.encode()))


def test_chunks_stay_within_max_tokens_with_overlap_and_headers() -> None:
    text = "# Doc\n\n" + " ".join(f"Sentence {n} has a few words." for n in range(40)) + "\n\n" + CSV
    document = parse(formats.MARKDOWN, text.encode())
    chunks, _ = chunker(target=20, maximum=26, overlap=10).chunk(document)
    assert all(len(c.text.split()) <= 26 for c in chunks)
