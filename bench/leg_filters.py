"""What the filters of a search's legs cost in the embedded index, no service.

    python bench/leg_filters.py [--points 100000] [--queries 150] [--rounds 3] [--label L]

An embedded shard holds one KB's points, so a leg's condition "kb_id is this KB" is true of every point; the
keyword leg's IDF is asked over the KB's live points (`IdfParams(corpus=...)`), because the shard's own
statistics count deleted points until its segments are vacuumed. This script writes the scaled SciFact corpus
(bench/scale.py) into one KB through the retriever's IndexService, builds HNSW, deletes every tenth document
(as updates and deletions leave a KB), and runs both legs of each question as one engine batch (the adapter's
own requests, no payloads) in four variants, interleaved: with and without the KB condition on the legs, with
and without the IDF corpus. Reports the p50 per variant and depth, and how many answers differ from the
adapter's (scores to 4 decimals): the KB condition changes none, the IDF corpus does once points were deleted.
Results: bench/results/leg-filters[-LABEL].json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from common import save_result
from point_ids import DIM, NUMBERED_KB, OneModel, Question, write_scaled_kb
from qdrant_edge import (
    FieldCondition,
    Filter,
    IdfParams,
    MatchValue,
    Query,
    QueryBatchRequest,
    QueryRequest,
    SearchParams,
    SparseVector,
)
from scale import load_base

from ragkb_core.settings import QdrantSettings
from ragkb_retriever.index.edge import EdgeIndex
from ragkb_retriever.index.schema import DENSE_VECTOR, SPARSE_VECTOR
from ragkb_retriever.indexing import IndexService

# (KB condition on the legs, IDF over the KB's live points)
VARIANTS = {
    "KB condition + IDF corpus (before)": (True, True),
    "IDF corpus only (now)": (False, True),
    "KB condition only": (True, False),
    "neither": (False, False),
}


def _requests(question: Question, depth: int, kb: Filter, variant: tuple[bool, bool]) -> list[QueryRequest]:
    condition, corpus = variant
    terms = question[1]
    return [
        QueryRequest(
            limit=depth,
            query=Query.Nearest(question[0], using=DENSE_VECTOR),
            filter=kb if condition else None,
            with_payload=False,
        ),
        QueryRequest(
            limit=depth,
            query=Query.Nearest(SparseVector(terms.indices, terms.values), using=SPARSE_VECTOR),
            filter=kb if condition else None,
            params=SearchParams(idf=IdfParams(corpus=kb)) if corpus else None,
            with_payload=False,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--depths", type=int, nargs="+", default=[84, 700])
    parser.add_argument("--label", default="")
    args = parser.parse_args()

    base = load_base(2000)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ragkb-leg-filters-") as folder:
        index = EdgeIndex(QdrantSettings(path=Path(folder) / "index", optimize_after_points=10**9))
        service = IndexService(index, OneModel())
        index.create_kb(NUMBERED_KB, DIM)
        questions, written = write_scaled_kb(
            index, service, NUMBERED_KB, points=args.points, base=base, queries=args.queries
        )
        for document_id in written[::10]:
            index.delete_document(NUMBERED_KB, document_id)
        kb = Filter(must=[FieldCondition("kb_id", match=MatchValue(NUMBERED_KB))])  # the adapter's kb_filter
        with index._shard(NUMBERED_KB) as (_, shard):
            for depth in args.depths:
                times: dict[str, list[float]] = {name: [] for name in VARIANTS}
                for _ in range(args.rounds):
                    for question in questions:
                        for name, variant in VARIANTS.items():
                            started = time.perf_counter()
                            shard.query_batch(QueryBatchRequest(_requests(question, depth, kb, variant)))
                            times[name].append((time.perf_counter() - started) * 1000)
                reference = next(iter(VARIANTS))  # the adapter's legs before this change
                differing = dict.fromkeys(VARIANTS, 0)
                for question in questions:
                    answers = {
                        name: [
                            [(point.id, round(point.score, 4)) for point in leg]
                            for leg in shard.query_batch(QueryBatchRequest(_requests(question, depth, kb, variant)))
                        ]
                        for name, variant in VARIANTS.items()
                    }
                    for name in VARIANTS:
                        differing[name] += answers[name] != answers[reference]
                for name in VARIANTS:
                    rows.append(
                        {
                            "depth": depth,
                            "variant": name,
                            "p50_ms": round(statistics.median(times[name]), 3),
                            "answers_differing": differing[name],
                        }
                    )
        index.close()

    lines = [
        f"`python bench/leg_filters.py --points {args.points} --queries {len(questions)} --rounds {args.rounds}`: "
        "both legs of a hybrid search in one Edge batch, HNSW built, every tenth document deleted; answers compared "
        "with the first variant's, scores to 4 decimals.",
        "",
        "| candidates a leg | legs' filters | p50 ms | answers differing |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {row['depth']} | {row['variant']} | {row['p50_ms']} | {row['answers_differing']} of {len(questions)} |"
        for row in rows
    ]
    name = f"leg-filters{'-' + args.label if args.label else ''}"
    save_result(
        name, {"points": args.points, "queries": len(questions), "rounds": args.rounds, "rows": rows}, "\n".join(lines)
    )


if __name__ == "__main__":
    main()
