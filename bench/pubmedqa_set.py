"""A retrieval collection built from PubMedQA's 1,000 labelled questions (ori_pqal.json), in BEIR layout,
outside the repo.

    python bench/pubmedqa_set.py [--out DIR]

Every question's abstract becomes a document (`_id` its PubMed id; no title, since the paper's title is often
the question itself, so bench/embedded.py titles it with its id as an upload is titled with its file name;
`text` its CONTEXTS — background, methods, results — one paragraph each, as a plain-text upload of the abstract
reads), every QUESTION a query whose one relevant document is its own abstract. The set is written to DIR
(default: $RAGKB_BENCH_CACHE/pubmedqa, see bench/embedded.py) and never into the repository (the data lives in
../shared/data/training/pubmedqa, licence MIT).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from common import DATA
from embedded import CACHE
from jaquad_set import write

SOURCE = DATA / "training" / "pubmedqa" / "ori_pqal.json"


def build(labelled: dict[str, dict[str, Any]]) -> tuple[list[dict[str, str]], ...]:
    """(corpus, queries, qrels rows) in BEIR's shapes."""
    corpus = [
        {"_id": pmid, "title": "", "text": "\n\n".join(entry["CONTEXTS"])} for pmid, entry in sorted(labelled.items())
    ]
    queries = [{"_id": f"q{pmid}", "text": entry["QUESTION"]} for pmid, entry in sorted(labelled.items())]
    qrels = [{"query-id": f"q{pmid}", "corpus-id": pmid, "score": "1"} for pmid in sorted(labelled)]
    return corpus, queries, qrels


def ensure(out: Path = CACHE / "pubmedqa") -> Path:
    """The collection's folder, built first when it is not there yet."""
    if not (out / "qrels" / "train.tsv").exists():
        corpus, queries, qrels = build(json.loads(SOURCE.read_text(encoding="utf-8")))
        write(out, corpus, queries, qrels)
        print(f"wrote {len(corpus)} documents and {len(queries)} queries to {out}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=CACHE / "pubmedqa")
    ensure(parser.parse_args().out)


if __name__ == "__main__":
    main()
