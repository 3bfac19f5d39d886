"""What a KB's second model (chunking.second_model) costs: CPU per chunk and per question of the packaged
all-MiniLM-L6-v2 beside the packaged e5, on the same texts, one thread each, in this process.

SciFact documents are chunked as the worker chunks them (KbChunking's defaults, e5's tokens) and each chunk is
embedded as the worker embeds it (title, then the chunk); the questions are SciFact's. Models: e5 in the KB's
passage precision `auto` (float32 or int8-block, whichever this CPU runs faster) and the retriever's query
precision, MiniLM on its float32 ONNX graph (what a server runs) and on torch (what ran before it had one).
Measured with the thread's CPU clock, rounds interleaved, so that load from other processes spreads over all.

With `--kb NAME` (a KB with a second model on the stack behind --url, e.g. bench/ingest.py's
`--kb-name bench-scifact-5183-minilm --chunking '{"second_model": "all-MiniLM-L6-v2"}'`) it also times searches
over HTTP, each question asked twice in turn, with the leg (the KB's settings) and without it (`second_weight`
0), alternating which goes first; every question is new to the server (a numbered suffix), so each search
embeds it: p50 of the whole request, of the server's `took_ms` and of its embed stage.

    python bench/second_model_cost.py [--chunks 240] [--queries 200] [--rounds 3] [--kb NAME] [--label NAME]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

from common import DATA, client, read_jsonl, save_result

from ragkb_core.settings import PACKAGED_MINILM_MODEL, EmbeddingSettings
from ragkb_models import EmbedderPool
from ragkb_models.embedder import Embedder


def chunk_texts(embedder: Embedder, count: int) -> list[str]:
    from ragkb_core.kb_settings import KbChunking
    from ragkb_worker.chunking import Chunker
    from ragkb_worker.parsing import parse
    from ragkb_worker.pipeline import embedding_text

    chunker = Chunker(embedder, KbChunking())
    texts: list[str] = []
    for document in read_jsonl(DATA / "scifact" / "corpus.jsonl"):
        chunks, _ = chunker.chunk(parse("text/plain", document["text"].encode()))
        texts.extend(embedding_text(document.get("title") or document["_id"], chunk) for chunk in chunks)
        if len(texts) >= count:
            return texts[:count]
    return texts


def cpu_ms(work: Callable[[], object]) -> float:
    started = time.thread_time()
    work()
    return (time.thread_time() - started) * 1000


def each(embed: Callable[[str], object], texts: list[str]) -> None:
    for text in texts:
        embed(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=240)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--label", default="")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--kb", default=None, help="also time searches of this KB over HTTP")
    args = parser.parse_args()

    settings = EmbeddingSettings(threads=1)
    torch_settings = settings.model_copy(update={"backend": "torch"})
    models: dict[str, tuple[Embedder, Embedder]] = {
        # (passages, queries): e5 as a new KB's passages and the retriever's queries are embedded.
        "e5 (auto)": (EmbedderPool(settings).get(None, "auto"), EmbedderPool(settings).get(None, "auto")),
        "MiniLM, ONNX float32": (EmbedderPool(settings).get(PACKAGED_MINILM_MODEL),) * 2,
        "MiniLM, torch": (EmbedderPool(torch_settings).get(PACKAGED_MINILM_MODEL),) * 2,
    }
    import torch

    torch.set_num_threads(1)
    texts = chunk_texts(models["e5 (auto)"][0], args.chunks)
    questions = [q["text"] for q in read_jsonl(DATA / "scifact" / "queries.jsonl")][: args.queries]
    per_chunk: dict[str, list[float]] = {name: [] for name in models}
    per_question: dict[str, list[float]] = {name: [] for name in models}
    for passages, queries in models.values():  # warm-up: sessions, first-run allocations
        passages.embed_passages(texts[:8])
        queries.embed_query(questions[0])
    for _ in range(args.rounds):
        for name, (passages, queries) in models.items():
            per_chunk[name].append(cpu_ms(partial(passages.embed_passages, texts)) / len(texts))
            per_question[name].append(cpu_ms(partial(each, queries.embed_query, questions)) / len(questions))
    e5_chunk, e5_question = (statistics.median(per_chunk["e5 (auto)"]), statistics.median(per_question["e5 (auto)"]))
    lines = [
        f"{len(texts)} SciFact chunks and {len(questions)} questions, one thread, thread CPU ms (median of "
        f"{args.rounds} rounds)",
        "",
        "| model | ms a chunk | ms a question | chunk cost ÷ e5's | question cost ÷ e5's |",
        "|---|---|---|---|---|",
    ]
    rows = []
    for name in models:
        chunk, question = statistics.median(per_chunk[name]), statistics.median(per_question[name])
        rows.append({"model": name, "ms_per_chunk": round(chunk, 2), "ms_per_question": round(question, 2)})
        lines.append(
            f"| {name} | {chunk:.1f} | {question:.2f} | {chunk / e5_chunk:.2f} | {question / e5_question:.2f} |"
        )
    searches = None if args.kb is None else search_latency(args.url, args.kb, questions)
    if searches is not None:
        lines += [
            "",
            f"Searches of KB {args.kb} over HTTP (top_k 12, hybrid), {len(questions)} new questions each, p50 ms:",
            "",
            "| | request | took_ms | embed |",
            "|---|---|---|---|",
            *(f"| {name} | {row['request']} | {row['took']} | {row['embed']} |" for name, row in searches.items()),
        ]
    result = {"rows": rows, "searches": searches}
    save_result(f"second-model-cost{'-' + args.label if args.label else ''}", result, "\n".join(lines))


def search_latency(url: str, kb_name: str, questions: list[str]) -> dict[str, dict[str, float]]:
    http = client(url)
    kb_id = next(kb["id"] for kb in http.get("/v1/knowledge-bases").json() if kb["name"] == kb_name)
    variants = {"with the second model's leg": {}, "without it (second_weight 0)": {"second_weight": 0}}
    timings: dict[str, dict[str, list[float]]] = {name: {"request": [], "took": [], "embed": []} for name in variants}
    stamp = int(time.time())
    for number, question in enumerate(questions):
        order = list(variants) if number % 2 == 0 else list(reversed(variants))
        for name in order:
            body = {
                "query": f"{question} ({stamp}-{number}-{len(name)})",
                "knowledge_base_ids": [kb_id],
                "settings": variants[name],
            }
            started = time.perf_counter()
            response = http.post("/v1/search", json=body)
            elapsed = (time.perf_counter() - started) * 1000
            response.raise_for_status()
            result = response.json()
            timings[name]["request"].append(elapsed)
            timings[name]["took"].append(result["took_ms"])
            timings[name]["embed"].append(result["timings_ms"].get("embed", 0.0))
    return {
        name: {stage: round(statistics.median(values), 1) for stage, values in stages.items()}
        for name, stages in timings.items()
    }


if __name__ == "__main__":
    main()
