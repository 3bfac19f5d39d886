"""bench/keyword_window.py's windows: each chunk's BM25 text widened with its document's text around it, each
piece once.

A whitespace tokenizer stands in for the model's, so that token counts are word counts."""

from __future__ import annotations

import re

from ragkb_core.kb_settings import KbChunking
from ragkb_worker.chunking import Chunk, Chunker
from ragkb_worker.parsing import parse
from tests.support.bench import bench_module

_WINDOWS = bench_module("keyword_window")
keyword_windows = _WINDOWS.keyword_windows
neighbour_windows = _WINDOWS.neighbour_windows


class WordTokenizer:
    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


class CharTokenizer:
    """One token per non-space character, as a model's tokenizer cuts Japanese finely."""

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        return [(m.start(), m.end()) for m in re.finditer(r"\S", text)]


def chunks_of(text: str, tokenizer: WordTokenizer | CharTokenizer, target: int, overlap: int = 0) -> list[Chunk]:
    chunking = KbChunking(target_tokens=target, max_tokens=target, overlap_tokens=overlap)
    return Chunker(tokenizer, chunking).chunk(parse("text/plain", text.encode()))[0]


# 8 sentences of 8 words; a chunk of 16 tokens holds 2.
SENTENCES = " ".join(" ".join(f"s{i}w{j}" for j in range(8)) + "." for i in range(8))
TARGET = 16


def words(text: str) -> list[str]:
    return text.split()


def document_words(start: int, stop: int) -> list[str]:
    return words(SENTENCES)[start:stop]


def test_off_keeps_each_chunk_text() -> None:
    chunks = chunks_of(SENTENCES, WordTokenizer(), target=TARGET)
    assert keyword_windows(chunks, 0, WordTokenizer()) == [chunk.text for chunk in chunks]


def test_a_middle_chunk_gets_as_much_before_as_after() -> None:
    chunks = chunks_of(SENTENCES, WordTokenizer(), target=TARGET)
    assert words(chunks[1].text) == document_words(16, 32)
    window = keyword_windows(chunks, 24, WordTokenizer())[1]
    assert words(window) == document_words(12, 36)


def test_the_first_and_last_chunk_take_their_whole_window_from_the_one_side_they_have() -> None:
    chunks = chunks_of(SENTENCES, WordTokenizer(), target=TARGET)
    windows = keyword_windows(chunks, 24, WordTokenizer())
    assert words(windows[0]) == document_words(0, 24)
    assert words(windows[-1]) == document_words(40, 64)


def test_a_window_wider_than_the_document_is_the_whole_document_once() -> None:
    chunks = chunks_of(SENTENCES, WordTokenizer(), target=TARGET, overlap=8)
    assert all(words(window) == words(SENTENCES) for window in keyword_windows(chunks, 1000, WordTokenizer()))


def test_overlapping_chunks_give_the_shared_text_once() -> None:
    chunks = chunks_of(SENTENCES, WordTokenizer(), target=TARGET, overlap=8)
    assert words(chunks[1].text) == document_words(8, 24)  # the previous chunk's last sentence, repeated
    window = keyword_windows(chunks, 32, WordTokenizer())[1]
    assert words(window) == document_words(0, 32)


def test_a_one_chunk_document_is_its_chunk() -> None:
    chunks = chunks_of("only a few words here.", WordTokenizer(), target=50)
    assert keyword_windows(chunks, 512, WordTokenizer()) == ["only a few words here."]


def test_a_window_no_wider_than_the_chunk_is_the_chunk() -> None:
    chunks = chunks_of(SENTENCES, WordTokenizer(), target=TARGET)
    assert keyword_windows(chunks, 6, WordTokenizer()) == [chunk.text for chunk in chunks]


def test_japanese_text_is_widened_by_tokens_across_sentence_ends() -> None:
    text = "東京は日本の首都である。大阪は西にある大きな街。京都は古い都で寺が多い。"
    chunks = chunks_of(text, CharTokenizer(), target=16)
    assert [chunk.text for chunk in chunks] == [
        "東京は日本の首都である。",
        "大阪は西にある大きな街。",
        "京都は古い都で寺が多い。",
    ]
    window = keyword_windows(chunks, 24, CharTokenizer())[1]
    assert window == "首都である。\n大阪は西にある大きな街。\n京都は古い都"


def test_neighbours_are_the_previous_and_next_chunk_whole_their_overlap_once() -> None:
    chunks = chunks_of(SENTENCES, WordTokenizer(), target=TARGET, overlap=8)
    windows = neighbour_windows(chunks)
    # Chunks of sentences 0-1, 1-2, 2-3, …, 6-7 (8 words each): a window is the sentences of three chunks, once.
    assert words(windows[0]) == document_words(0, 24)
    assert words(windows[1]) == document_words(0, 32)
    assert words(windows[-1]) == document_words(40, 64)
