"""Step 1 of the reranker recipe: training groups (question, its passage, hard negatives) mined with ragkb itself.

    python models/reranker/prepare.py [--url http://127.0.0.1:8000] [--ja-questions 5000] [--out var/reranker/data]

Needs a running ragkb (`make run`). The training passages — JaQuAD train contexts (Japanese Wikipedia) and
PubMedQA abstracts (English), read in place from ../shared/data/training — are ingested into a KB of their own
(`reranker-training`) through the public API, so they are chunked exactly as users' documents are. Each
question is then searched in hybrid mode without reranking:

- positive: the best-ranked chunk of the question's own passage (for JaQuAD, one that contains the answer);
- hard negatives: the best-ranked chunks of other passages (for JaQuAD, none that contains the answer string,
  so a chunk that answers the question is never taught as irrelevant).

Nothing from ../shared/data/scifact or jsquad is used; JaQuAD articles whose title is also a JSQuAD article are
left out, so no evaluation paragraph can leak into training. A fixed seed picks the questions and the held-out
dev split (the dev questions' passages are still in the KB, as in real use; the questions are not trained on).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from common import DATA, client, find_kb, read_jsonl  # noqa: E402
from ingest import upload_all, wait_until_settled  # noqa: E402

from ragkb_models.cross_encoder import passage_for_reranking  # noqa: E402

TRAINING = DATA / "training"
KB_NAME = "reranker-training"
SEED = 20261202
DEPTH = 30
NEGATIVES_KEPT = 8


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    source_id: str
    answer: str | None  # JaQuAD's answer span; PubMedQA asks yes/no questions about the whole abstract
    lang: str


def jaquad(excluded_titles: set[str]) -> tuple[list[dict[str, str]], list[Question]]:
    passages: list[dict[str, str]] = []
    questions: list[Question] = []
    for path in sorted((TRAINING / "jaquad_train").glob("jaquad_train_*.json")):
        for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
            if article["title"] in excluded_titles:
                continue
            for paragraph in article["paragraphs"]:
                # Question ids are tr-<article>-<paragraph>-<n>: the paragraph's id is the prefix.
                source_id = "jaquad-" + paragraph["qas"][0]["id"].rsplit("-", 1)[0]
                passages.append({"_id": source_id, "title": article["title"], "text": paragraph["context"]})
                for qa in paragraph["qas"]:
                    answer = qa["answers"][0]["text"].strip("『』「」")
                    questions.append(Question(qa["id"], qa["question"], source_id, answer, "ja"))
    return passages, questions


def pubmedqa() -> tuple[list[dict[str, str]], list[Question]]:
    records = json.loads((TRAINING / "pubmedqa" / "ori_pqal.json").read_text(encoding="utf-8"))
    passages = [
        {"_id": f"pubmedqa-{pmid}", "title": "", "text": " ".join(r["CONTEXTS"])} for pmid, r in records.items()
    ]
    questions = [Question(f"pmqa-{pmid}", r["QUESTION"], f"pubmedqa-{pmid}", None, "en") for pmid, r in records.items()]
    return passages, questions


def evaluation_titles() -> set[str]:
    return {row["title"] for row in read_jsonl(DATA / "jsquad" / "corpus.jsonl")}


def ensure_training_kb(http: Any, passages: list[dict[str, str]]) -> str:
    existing = find_kb(http, KB_NAME)
    if existing is not None and existing["document_counts"].get("done", 0) >= len(passages):
        return str(existing["id"])
    if existing is None:
        response = http.post("/v1/knowledge-bases", json={"name": KB_NAME, "description": "reranker training"})
        response.raise_for_status()
        existing = response.json()
    kb_id = str(existing["id"])
    print(f"ingesting {len(passages)} passages into {KB_NAME}", flush=True)
    upload_all(http, kb_id, passages, workers=4)
    counts = wait_until_settled(http, kb_id, len(passages), timeout_s=7200)
    print(f"ingested: {counts}", flush=True)
    return kb_id


def mine(http: Any, kb_id: str, question: Question) -> dict[str, Any] | None:
    body = {
        "query": question.text,
        "knowledge_base_ids": [kb_id],
        "mode": "hybrid",
        "settings": {"top_k": DEPTH, "max_blocks": DEPTH, "rerank": False},
    }
    response = http.post("/v1/search", json=body)
    response.raise_for_status()
    hits = response.json()["results"]
    positive = next((h for h in hits if is_positive(h, question)), None)
    if positive is None:
        return None  # the passage was not retrieved in the top DEPTH: no chunk to pair the question with
    negatives = [
        reranker_view(h) for h in hits if h["source_id"] != question.source_id and not answers(h["text"], question)
    ]
    return {
        "id": question.id,
        "lang": question.lang,
        "query": question.text,
        "positive": reranker_view(positive),
        "positive_rank": hits.index(positive) + 1,
        "negatives": negatives[:NEGATIVES_KEPT],
        # The whole hybrid list, fused scores and all: evaluate.py replays reranking on it (dev groups only).
        "candidates": [
            {"text": reranker_view(h), "fused": h["score"], "relevant": is_positive(h, question)} for h in hits
        ],
    }


def reranker_view(hit: dict[str, Any]) -> str:
    """The passage as the retriever hands it to the reranker (title, headings, text). An untitled upload is
    titled with its source id (PubMedQA here), which says nothing about the text: left out."""
    title = hit["title"] if hit["title"] != hit["source_id"] else None
    return passage_for_reranking(title, hit.get("heading_path") or [], hit["text"])


def is_positive(hit: dict[str, Any], question: Question) -> bool:
    return bool(hit["source_id"] == question.source_id and (question.answer is None or question.answer in hit["text"]))


def answers(text: str, question: Question) -> bool:
    return question.answer is not None and question.answer in text


def mined(http: Any, kb_id: str, questions: list[Question]) -> Iterator[dict[str, Any]]:
    with ThreadPoolExecutor(4) as pool:
        for done, group in enumerate(pool.map(lambda q: mine(http, kb_id, q), questions), start=1):
            if done % 500 == 0:
                print(f"mined {done}/{len(questions)}", flush=True)
            if group is not None and group["negatives"]:
                yield group


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--ja-passages", type=int, default=4000, help="JaQuAD contexts to ingest (of 9,701)")
    parser.add_argument("--ja-questions", type=int, default=5000, help="JaQuAD questions to mine (of 31,748)")
    parser.add_argument("--dev-questions", type=int, default=400, help="held out for validation (JA and EN mixed)")
    parser.add_argument("--out", type=Path, default=REPO / "var" / "reranker" / "data")
    args = parser.parse_args()
    ja_passages, ja_questions = jaquad(evaluation_titles())
    # The first N contexts in file order, and only their questions: ingestion (embedding every chunk) is the
    # slow part of this step on 2 cores, and hard negatives come mostly from the same or nearby articles.
    ja_passages = ja_passages[: args.ja_passages]
    kept = {passage["_id"] for passage in ja_passages}
    ja_questions = [question for question in ja_questions if question.source_id in kept]
    en_passages, en_questions = pubmedqa()
    http = client(args.url)
    kb_id = ensure_training_kb(http, ja_passages + en_passages)
    rng = random.Random(SEED)
    questions = rng.sample(ja_questions, min(args.ja_questions, len(ja_questions))) + en_questions
    rng.shuffle(questions)
    groups = list(mined(http, kb_id, questions))
    dev, train = groups[: args.dev_questions], groups[args.dev_questions :]
    for group in train:
        del group["candidates"]  # training reads the positive and the negatives only
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("dev", dev)):
        with (args.out / f"{name}.jsonl").open("w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    summary = {
        "questions": len(questions),
        "groups": len(groups),
        "train": len(train),
        "dev": len(dev),
        "jaquad_passages": len(ja_passages),
        "pubmedqa_passages": len(en_passages),
    }
    (args.out / "summary.json").write_text(json.dumps(summary, ensure_ascii=False, indent=2), encoding="utf-8")
    print(summary)


if __name__ == "__main__":
    main()
