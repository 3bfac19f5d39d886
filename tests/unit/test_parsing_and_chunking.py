"""Parsing and chunking rules, with a whitespace tokenizer standing in for the model's (the integration
tests run the real one)."""

from __future__ import annotations

import re

import pytest

from ragkb_core.errors import ParseFailed
from ragkb_core.formats import MARKDOWN, PLAIN_TEXT
from ragkb_core.kb_settings import KbChunking
from ragkb_core.settings import LimitSettings
from ragkb_worker.chunking import Chunker
from ragkb_worker.parsing import decode_text, markdown_sections, parse, parse_markdown


class WordTokenizer:
    """One token per run of non-space characters: easy to reason about in assertions."""

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def chunker(target: int = 20, maximum: int = 30, overlap: int = 0) -> Chunker:
    return Chunker(WordTokenizer(), KbChunking(target_tokens=target, max_tokens=maximum, overlap_tokens=overlap))


def test_markdown_sections_follow_the_heading_path() -> None:
    text = "# Guide\nintro\n## Install\nrun it\n### Linux\napt\n## Use\ncall it\n"
    sections = markdown_sections(text)
    assert [(s.heading_path, text[s.start : s.end].strip()) for s in sections] == [
        (("Guide",), "intro"),
        (("Guide", "Install"), "run it"),
        (("Guide", "Install", "Linux"), "apt"),
        (("Guide", "Use"), "call it"),
    ]


def test_headings_inside_code_fences_are_not_headings() -> None:
    text = "# Real\nbefore\n```\n# not a heading\n```\nafter\n"
    sections = markdown_sections(text)
    assert [s.heading_path for s in sections] == [("Real",)]


def test_heading_only_sections_produce_no_chunk() -> None:
    document = parse_markdown(b"# Title\n## Empty section\n## Filled\nsome words here\n", LimitSettings())
    chunks, _ = chunker().chunk(document)
    assert [(c.heading_path, c.text) for c in chunks] == [(("Title", "Filled"), "some words here")]


def test_chunks_are_verbatim_slices_within_the_token_bound() -> None:
    paragraphs = [" ".join(f"w{p}_{i}" for i in range(12)) for p in range(6)]
    text = "\n\n".join(paragraphs)
    document = parse(PLAIN_TEXT, text.encode())
    chunks, report = chunker(target=20, maximum=30).chunk(document)
    assert report.chunks == len(chunks) == 6
    for chunk in chunks:
        assert text[chunk.char_start : chunk.char_end] == chunk.text
        assert len(chunk.text.split()) <= 30


def test_small_paragraphs_are_packed_up_to_the_target() -> None:
    text = "\n\n".join("alpha beta gamma" for _ in range(10))
    chunks, _ = chunker(target=18, maximum=24).chunk(parse(PLAIN_TEXT, text.encode()))
    assert [len(c.text.split()) for c in chunks] == [18, 12]


def test_an_overlong_sentence_is_cut_into_token_windows() -> None:
    text = " ".join(f"t{i}" for i in range(50))
    chunks, _ = chunker(target=20, maximum=25).chunk(parse(PLAIN_TEXT, text.encode()))
    assert [len(c.text.split()) for c in chunks] == [20, 20, 10]
    assert " ".join(c.text for c in chunks) == text


def test_overlap_carries_trailing_sentences_into_the_next_chunk() -> None:
    sentences = [" ".join(f"s{n}w{i}" for i in range(8)) + "." for n in range(4)]
    text = " ".join(sentences)
    chunks, _ = chunker(target=16, maximum=24, overlap=8).chunk(parse(PLAIN_TEXT, text.encode()))
    assert chunks[0].text == " ".join(sentences[:2])
    assert chunks[1].text.startswith(sentences[1])


def test_japanese_sentences_split_at_full_stops() -> None:
    sentence = "これは日本語の文です。"
    text = sentence * 30
    chunks, _ = Chunker(CharTokenizer(), KbChunking(target_tokens=50, max_tokens=60, overlap_tokens=0)).chunk(
        parse(PLAIN_TEXT, text.encode())
    )
    assert all(c.text.endswith("。") for c in chunks)
    assert "".join(c.text for c in chunks) == text


class CharTokenizer:
    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        return [(i, i + 1) for i in range(len(text))]


def test_symbol_only_text_is_dropped_and_counted() -> None:
    document = parse(MARKDOWN, b"# A\n\n---\n\n# B\nreal text\n")
    chunks, report = chunker().chunk(document)
    assert [c.text for c in chunks] == ["real text"]
    assert report.dropped["empty"] == 1


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("有給休暇".encode(), "有給休暇"),
        ("\ufeffBOM".encode(), "BOM"),
        ("就業規則".encode("cp932"), "就業規則"),
        ("utf16".encode("utf-16"), "utf16"),
    ],
)
def test_decoding_accepts_utf8_shift_jis_and_utf16(data: bytes, expected: str) -> None:
    assert decode_text(data) == expected


def test_undecodable_bytes_fail_with_a_reason() -> None:
    with pytest.raises(ParseFailed, match="cannot be decoded"):
        decode_text(bytes(range(128, 256)) * 20)


def test_whitespace_only_document_fails() -> None:
    with pytest.raises(ParseFailed, match="no text"):
        parse(PLAIN_TEXT, b"   \n\n  ")
