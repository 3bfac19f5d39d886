"""What a chunk's BM25 vector is built from: the chunk widened with the text around it in its document.

A passage is found by its words; a claim's key term is often one sentence before or after the chunk that answers
it. The dense vector keeps reading the chunk alone (longer chunks blur it: bench/chunking.py), while the keyword
vector may read a window of about `window_tokens` model tokens centred on the chunk: the chunk, then as much of the
document's text before it as after it (a side that runs out gives its share to the other). The passage a search
returns is still the chunk.

Neighbouring chunks overlap (KbChunking.overlap_tokens); the window takes each piece of text once. The window
depends only on the document's chunks, so a document built in ranges (ragkb_worker.long_documents) gets the same
keyword vectors as one built whole, whatever the number of workers.
"""

from __future__ import annotations

import itertools

from ragkb_worker.chunking import Chunk, Tokenizer


def keyword_windows(chunks: list[Chunk], window_tokens: int, tokenizer: Tokenizer) -> list[str]:
    """Each chunk's text widened to about `window_tokens` tokens; the chunks' own texts when the window is 0
    or no wider than a chunk."""
    if window_tokens <= 0:
        return [chunk.text for chunk in chunks]
    leads = [_lead(chunk, following) for chunk, following in itertools.pairwise(chunks)]
    fresh = [_fresh(previous, chunk) for previous, chunk in itertools.pairwise(chunks)]
    lead_offsets = [tokenizer.token_offsets(text) for text in leads]
    fresh_offsets = [tokenizer.token_offsets(text) for text in fresh]
    windows = []
    for index, chunk in enumerate(chunks):
        before_room, after_room = _rooms(window_tokens - chunk.tokens, lead_offsets[:index], fresh_offsets[index:])
        before = _tail(leads[:index], lead_offsets[:index], before_room)
        after = _head(fresh[index:], fresh_offsets[index:], after_room)
        windows.append("\n".join(part for part in (before, chunk.text, after) if part))
    return windows


def overlap_chars(previous: Chunk, chunk: Chunk) -> int:
    """Characters at the start of `chunk` that end `previous` too (the chunker's overlap); 0 across sections."""
    return max(0, min(previous.char_end - chunk.char_start, len(chunk.text), len(previous.text)))


def _lead(chunk: Chunk, following: Chunk) -> str:
    """The part of `chunk` that the next chunk does not repeat: the text just before the next chunk."""
    return chunk.text[: len(chunk.text) - overlap_chars(chunk, following)]


def _fresh(previous: Chunk, chunk: Chunk) -> str:
    """The part of `chunk` that the previous chunk did not hold: the text just after the previous chunk."""
    return chunk.text[overlap_chars(previous, chunk) :]


Offsets = list[tuple[int, int]]


def _rooms(room: int, before: list[Offsets], after: list[Offsets]) -> tuple[int, int]:
    """Tokens to take before and after the chunk: half each, a side that has less giving the rest to the other."""
    if room <= 0:
        return 0, 0
    available_before = sum(len(offsets) for offsets in before)
    available_after = sum(len(offsets) for offsets in after)
    before_room = min(available_before, max(room // 2, room - available_after))
    return before_room, min(available_after, room - before_room)


def _tail(texts: list[str], offsets: list[Offsets], tokens: int) -> str:
    """The last `tokens` tokens of the texts read in order (nearest the chunk last)."""
    parts: list[str] = []
    for text, text_offsets in zip(reversed(texts), reversed(offsets), strict=True):
        if tokens <= 0:
            break
        parts.insert(0, text if len(text_offsets) <= tokens else text[text_offsets[-tokens][0] :])
        tokens -= len(text_offsets)
    return "\n".join(parts)


def _head(texts: list[str], offsets: list[Offsets], tokens: int) -> str:
    """The first `tokens` tokens of the texts read in order (nearest the chunk first)."""
    parts: list[str] = []
    for text, text_offsets in zip(texts, offsets, strict=True):
        if tokens <= 0:
            break
        parts.append(text if len(text_offsets) <= tokens else text[: text_offsets[tokens - 1][1]])
        tokens -= len(text_offsets)
    return "\n".join(parts)
