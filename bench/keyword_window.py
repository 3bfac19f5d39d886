"""A wider keyword window, dense chunks unchanged: by cross-validation across collections, offline, on the real engine.

    python bench/keyword_window.py [--collections scifact:train pubmedqa:train jsquad:dev jaquad:train] [--folds 5]
                                   [--windows off neighbours 384 512 768]

bench/chunking.py found longer chunks better for the keyword leg on SciFact but worse for the dense leg on JaQuAD.
Here every collection is cut once, with the default KbChunking (256/400/32), and embedded once (bench/embedded.py's
cache): the dense vectors are those of the chunks. Only what each chunk's BM25 vector is built from changes:
- off: the chunk (today);
- neighbours: the chunk with the whole previous and next chunk of its document (their overlap taken once);
- N (tokens): the chunk widened to about N model tokens with the text around it, as much before as after, a
  side that runs out giving its share to the other (keyword_windows below: what the worker would build; not
  adopted, see the README's Benchmarks).
The title and heading path go first, as the worker indexes them (embedding_text). The index, the queries and the
scoring are bench/chunking.py's (a new KB's retrieval: analyzer v2, title weight, DBSF, top_k × multiplier a leg),
and so is the choice: hybrid nDCG@10, leave one collection out and k folds within collections, never on one
collection's own queries, with paired bootstrap 95 % intervals of the held-out gain over "off".
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import Any

import numpy as np
from chunking import KB_DEFAULT, LEGS, _m, cached, choose, cv_markdown, k_folds, leave_one_out, scores_of
from common import read_jsonl, save_result
from embedded import Collection, embedder, folder_of, load
from numpy.typing import NDArray

from ragkb_core.kb_settings import KbChunking
from ragkb_worker.chunking import Chunk, Chunker, Tokenizer
from ragkb_worker.parsing import parse

OFF = "off"
WINDOWS = (OFF, "neighbours", "384", "512", "768")
Scores = dict[str, NDArray[np.float64]]


# -- the windows ------------------------------------------------------------------------------------


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


def neighbour_windows(chunks: list[Chunk]) -> list[str]:
    """Each chunk with the previous and next chunk whole, the text they share with it taken once."""
    windows = []
    for index, chunk in enumerate(chunks):
        parts = [chunk.text]
        if index:
            previous = chunks[index - 1]
            parts.insert(0, previous.text[: len(previous.text) - overlap_chars(previous, chunk)])
        if index + 1 < len(chunks):
            following = chunks[index + 1]
            parts.append(following.text[overlap_chars(chunk, following) :])
        windows.append("\n".join(part for part in parts if part))
    return windows


def widen(window: str) -> Callable[[list[Chunk]], list[str]]:
    if window == OFF:
        return lambda chunks: [chunk.text for chunk in chunks]
    if window == "neighbours":
        return neighbour_windows
    return lambda chunks: keyword_windows(chunks, int(window), embedder())


@cache
def document_chunks(name: str) -> list[list[Chunk]]:
    """Each document's chunks, cut as bench/embedded.py cuts them (the default chunking), once per run."""
    chunker = Chunker(embedder(), KbChunking())
    return [
        chunker.chunk(parse("text/plain", document["text"].encode()))[0]
        for document in read_jsonl(folder_of(name) / "corpus.jsonl")
    ]


def windowed(collection: Collection, window: str) -> Collection:
    """The collection with each passage's keyword text (`indexed`) built from its window; dense vectors as they are."""
    texts = [text for chunks in document_chunks(collection.name) for text in widen(window)(chunks)]
    if len(texts) != len(collection.passages):
        raise RuntimeError(f"{collection.label}: {len(texts)} windows for {len(collection.passages)} passages")
    passages = [
        replace(passage, indexed=passage.indexed[: len(passage.indexed) - len(passage.body)] + text)
        for passage, text in zip(collection.passages, texts, strict=True)
    ]
    return replace(collection, passages=passages)


def measured(spec: str, collection: Collection, window: str) -> Scores:
    """From the cache, or measured now."""
    return cached("keyword_window", f"{spec}-{window}", lambda: scores_of(windowed(collection, window)))


def markdown(result: dict[str, Any]) -> str:
    lines = ["Per collection and keyword window (dense chunks 256/400/32 in all): nDCG@10", ""]
    lines += ["| collection | queries | keyword window | dense | keyword | hybrid |", "|---|---|---|---|---|---|"]
    for name, info in result["collections"].items():
        for window, row in info["windows"].items():
            lines.append(
                f"| {name} | {info['queries']} | {window} | {row['dense']} | {row['keyword']} | {row['hybrid']} |"
            )
    lines += cv_markdown(result["cv"], list(result["collections"]), OFF)
    lines += ["", "The same, keyword leg alone (k folds pooled; the window chosen by the keyword leg)", ""]
    lines += ["| collection | off | held-out | gain | CI |", "|---|---|---|---|---|"]
    for name, row in result["keyword_cv"]["pooled"].items():
        lines.append(f"| {name} | {row['today']} | {row['held_out_ndcg']} | {row['gain']} | {row['ci']} |")
    return "\n".join(lines) + "\n"


def cross_validated(per: dict[str, Scores], folds: int) -> dict[str, Any]:
    kfold, pooled = k_folds(per, folds, today=OFF)
    chosen = choose(per, {n: np.ones(len(per[n][OFF]), dtype=bool) for n in per})
    return {"loco": leave_one_out(per, today=OFF), "kfold": kfold, "pooled": pooled, "chosen_on_all": chosen}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--collections", nargs="+", default=["scifact:train", "pubmedqa:train", "jsquad:dev", "jaquad:train"]
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--windows", nargs="+", default=list(WINDOWS), help="off first: off, neighbours, N tokens")
    parser.add_argument("--name", default=f"keyword-window-{time.strftime('%Y-%m-%d')}")
    args = parser.parse_args()
    runs: dict[str, dict[str, Scores]] = {}
    for spec in args.collections:
        collection = load(spec)
        runs[spec] = {window: measured(spec, collection, window) for window in args.windows}
    result = {
        "retrieval": KB_DEFAULT.label(),
        "collections": {
            spec: {
                "queries": len(by[OFF]["hybrid"]),
                "windows": {w: {leg: _m(scores[leg]) for leg in LEGS} for w, scores in by.items()},
            }
            for spec, by in runs.items()
        },
        "cv": cross_validated({s: {w: sc["hybrid"] for w, sc in by.items()} for s, by in runs.items()}, args.folds),
        "keyword_cv": cross_validated(
            {s: {w: sc["keyword"] for w, sc in by.items()} for s, by in runs.items()}, args.folds
        ),
    }
    save_result(args.name, result, markdown(result))


if __name__ == "__main__":
    main()
