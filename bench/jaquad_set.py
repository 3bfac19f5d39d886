"""A passage-retrieval collection built from JaQuAD train (SQuAD format), in BEIR layout, outside the repo.

    python bench/jaquad_set.py [--out DIR] [--articles N] [--max-queries N] [--seed S]

Every context becomes a document (`title` = its Wikipedia article, `text` = the context), every question a
query whose one relevant document is its own context. Contexts that occur twice (the same text under one
title) are one document, and the questions of both judge it. So that embedding it stays within minutes on 2
shared cores, the set is a seeded random sample of whole articles (`--articles`, default 230 of 691: about a
third of the 9,713 contexts, every context of a chosen article kept, so its near neighbours compete) and of
their questions (`--max-queries`, default 3,000). The set is written to DIR (default:
$RAGKB_BENCH_CACHE/jaquad, see bench/embedded.py) and never into the repository (the data's licence is
CC BY-SA 3.0; it lives in ../shared/data/training/jaquad_train).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from common import DATA
from embedded import CACHE

SOURCE = DATA / "training" / "jaquad_train"
DEFAULT_ARTICLES = 230
DEFAULT_QUERIES = 3000


def read_squad(folder: Path) -> list[dict[str, Any]]:
    articles: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.json")):
        articles.extend(json.loads(path.read_text(encoding="utf-8"))["data"])
    return articles


def build(
    articles: list[dict[str, Any]], max_articles: int, max_queries: int, seed: int
) -> tuple[list[dict[str, str]], ...]:
    """(corpus, queries, qrels rows) in BEIR's shapes."""
    rng = random.Random(seed)
    articles = rng.sample(articles, min(max_articles, len(articles)))
    corpus: list[dict[str, str]] = []
    ids: dict[tuple[str, str], str] = {}
    questions: list[tuple[str, str, str]] = []
    for article in articles:
        for paragraph in article["paragraphs"]:
            key = (article["title"], paragraph["context"])
            if key not in ids:
                ids[key] = f"jaquad-{len(ids):05d}"
                corpus.append({"_id": ids[key], "title": article["title"], "text": paragraph["context"]})
            questions.extend((qa["id"], qa["question"], ids[key]) for qa in paragraph["qas"])
    sample = sorted(rng.sample(questions, min(max_queries, len(questions))))
    queries = [{"_id": qid, "text": text} for qid, text, _ in sample]
    qrels = [{"query-id": qid, "corpus-id": doc, "score": "1"} for qid, _, doc in sample]
    return corpus, queries, qrels


def write(out: Path, corpus: list[dict[str, str]], queries: list[dict[str, str]], qrels: list[dict[str, str]]) -> None:
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    for name, rows in (("corpus.jsonl", corpus), ("queries.jsonl", queries)):
        with (out / name).open("w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    lines = ["query-id\tcorpus-id\tscore"] + [f"{r['query-id']}\t{r['corpus-id']}\t{r['score']}" for r in qrels]
    (out / "qrels" / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def ensure(
    out: Path = CACHE / "jaquad", articles: int = DEFAULT_ARTICLES, max_queries: int = DEFAULT_QUERIES, seed: int = 21
) -> Path:
    """The collection's folder, built first when it is not there yet."""
    if not (out / "qrels" / "train.tsv").exists():
        corpus, queries, qrels = build(read_squad(SOURCE), articles, max_queries, seed)
        write(out, corpus, queries, qrels)
        print(f"wrote {len(corpus)} documents and {len(queries)} queries to {out}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=CACHE / "jaquad")
    parser.add_argument("--articles", type=int, default=DEFAULT_ARTICLES)
    parser.add_argument("--max-queries", type=int, default=DEFAULT_QUERIES)
    parser.add_argument("--seed", type=int, default=21)
    args = parser.parse_args()
    ensure(args.out, args.articles, args.max_queries, args.seed)


if __name__ == "__main__":
    main()
