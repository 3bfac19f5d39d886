"""What a point's id kind costs a search in the embedded index: UUID ids (every KB written before numbered ids)
against numbered ones (ragkb_core.ids), no service.

    python bench/point_ids.py [--points 100000] [--queries 300] [--depths 84 300 700] [--label L]

Qdrant Edge returns a numbered point's id as a Python int, but builds a uuid.UUID object for every UUID id it
returns, and the adapter then turns it into text: per candidate of each leg. This script writes the same
scaled SciFact corpus (bench/scale.py: real passages and vectors, near-duplicated) into two KBs of one
EdgeIndex through the retriever's IndexService: one whose shard already held a UUID point when the index was
opened (as after an upgrade: it keeps UUID ids) and one new (numbered ids). Both are optimised (HNSW). Then
each question (a perturbed passage's vector and its 8 highest-weighted BM25 terms) runs a hybrid search
(`EdgeIndex.search`: both legs, DBSF, the answer's payloads) on each KB in turn, A B B A, at each candidate
depth (84 = a default top_k of 12 × 7; 700 = top_k 100 × 7), answering 10 passages (100 at depth 700).
Reports p50/p95 per KB and depth, their ratio, and whether both KBs answered the same passages (by document
and ordinal) in the same order. Results: bench/results/point-ids[-LABEL].json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import percentile, save_result
from scale import CHUNKS_PER_DOCUMENT, BaseSet, documents, load_base

from ragkb_core import ids
from ragkb_core.contracts import DocumentPoints, ScopeFilter, SparseTerms
from ragkb_core.settings import QdrantSettings
from ragkb_retriever.index.edge import EdgeIndex
from ragkb_retriever.index.port import IndexPoint
from ragkb_retriever.indexing import IndexService

UUID_KB = "0" * 31 + "a"
NUMBERED_KB = "0" * 31 + "b"
DIM = 384
QUERY_TERMS = 8


class _Dimension:
    dimension = DIM


class OneModel:
    default_model = "e5"

    def get(self, model: str | None = None) -> _Dimension:
        return _Dimension()


def _seed_uuid_shard(root: Path) -> None:
    """A KB whose shard holds one UUID point, written and closed before the measured index opens it."""
    index = EdgeIndex(QdrantSettings(path=root))
    index.create_kb(UUID_KB, DIM)
    seed = IndexPoint(
        id=ids.point_id(UUID_KB, "seed", 1, 0, numbered=False),
        dense=[1.0] + [0.0] * (DIM - 1),
        sparse=SparseTerms(indices=[], values=[]),
        payload={"kb_id": UUID_KB, "document_id": "seed", "version": 1, "ordinal": 0},
    )
    index.upsert(UUID_KB, [seed])
    index.close()


# A question of the scaled corpus: a passage's vector and its highest-weighted BM25 terms.
Question = tuple[list[float], SparseTerms]


def question_of(document: DocumentPoints) -> Question:
    chunk = document.chunks[0]
    best = sorted(zip(chunk.sparse.values, chunk.sparse.indices, strict=True), reverse=True)[:QUERY_TERMS]
    return chunk.dense, SparseTerms(indices=[term for _, term in best], values=[1.0] * len(best))


def write_scaled_kb(
    index: EdgeIndex, service: IndexService, kb_id: str, *, points: int, base: BaseSet, queries: int
) -> tuple[list[Question], list[str]]:
    """The scaled corpus written into the KB through the retriever's IndexService, HNSW built; about `queries`
    questions spread over it (`question_of` its documents), and every document's id."""
    every = max(1, points // CHUNKS_PER_DOCUMENT // queries)
    questions: list[Question] = []
    document_ids: list[str] = []
    for number, document in enumerate(documents(kb_id, points, base, seed=1)):
        service.write_document(document)
        document_ids.append(document.document_id)
        if number % every == 0:
            questions.append(question_of(document))
    index.optimize(kb_id)
    return questions, document_ids


def _search(index: EdgeIndex, kb_id: str, question: Question, depth: int) -> tuple[float, list[tuple[Any, Any]]]:
    limit = 100 if depth >= 700 else 10
    started = time.perf_counter()
    # As the retriever searches: no payloads for the legs' candidates, only for the answer.
    found = index.search(
        kb_id, question[0], question[1], ScopeFilter(), limit, depth, 60, fusion="dbsf", leg_payloads=False
    )
    elapsed = (time.perf_counter() - started) * 1000
    # Ties are ordered by point id, so two near-copies with the same score may swap between the two KBs.
    answer = [(hit.payload.get("document_id"), hit.payload.get("ordinal")) for hit in found.fused]
    return elapsed, answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--depths", type=int, nargs="+", default=[84, 300, 700])
    parser.add_argument("--base", type=int, default=2000)
    parser.add_argument("--label", default="")
    args = parser.parse_args()

    base = load_base(args.base)
    with tempfile.TemporaryDirectory(prefix="ragkb-point-ids-") as folder:
        root = Path(folder) / "index"
        _seed_uuid_shard(root)
        index = EdgeIndex(QdrantSettings(path=root, optimize_after_points=10**9))
        service = IndexService(index, OneModel())
        index.create_kb(NUMBERED_KB, DIM)
        kinds = {UUID_KB: index.numbered_point_ids(UUID_KB), NUMBERED_KB: index.numbered_point_ids(NUMBERED_KB)}
        assert kinds == {UUID_KB: False, NUMBERED_KB: True}, kinds
        index.delete_document(UUID_KB, "seed")  # the shard keeps UUID ids; both KBs now hold the same points
        started = time.perf_counter()
        write_scaled_kb(index, service, UUID_KB, points=args.points, base=base, queries=args.queries)
        questions, _ = write_scaled_kb(index, service, NUMBERED_KB, points=args.points, base=base, queries=args.queries)
        print(f"wrote and optimised 2 × {args.points} points in {time.perf_counter() - started:.0f} s", flush=True)
        questions = questions[: args.queries]

        rows: list[dict[str, Any]] = []
        for depth in args.depths:
            times: dict[str, list[float]] = {UUID_KB: [], NUMBERED_KB: []}
            same = 0
            for position, question in enumerate(questions):
                order = (UUID_KB, NUMBERED_KB) if position % 2 == 0 else (NUMBERED_KB, UUID_KB)
                answers = {}
                for kb_id in order:
                    elapsed, answers[kb_id] = _search(index, kb_id, question, depth)
                    times[kb_id].append(elapsed)
                same += answers[UUID_KB] == answers[NUMBERED_KB]
            uuid_p50, numbered_p50 = statistics.median(times[UUID_KB]), statistics.median(times[NUMBERED_KB])
            rows.append(
                {
                    "depth": depth,
                    "uuid_p50_ms": round(uuid_p50, 3),
                    "uuid_p95_ms": round(percentile(times[UUID_KB], 95), 3),
                    "numbered_p50_ms": round(numbered_p50, 3),
                    "numbered_p95_ms": round(percentile(times[NUMBERED_KB], 95), 3),
                    "ratio_p50": round(numbered_p50 / uuid_p50, 3),
                    "same_answers": f"{same}/{len(questions)}",
                }
            )
            print(rows[-1], flush=True)
        index.close()

    lines = [
        f"`python bench/point_ids.py --points {args.points} --queries {len(questions)}`: a hybrid search "
        "(`EdgeIndex.search`, DBSF, payloads of the answer) on a KB of UUID ids against one of numbered ids, "
        "the same points, A B B A; 10 passages answered, 100 at depth 700.",
        "",
        "| candidates a leg | UUID ids p50 / p95 ms | numbered p50 / p95 ms | p50 ratio | same answers |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {row['depth']} | {row['uuid_p50_ms']} / {row['uuid_p95_ms']} | {row['numbered_p50_ms']} / "
        f"{row['numbered_p95_ms']} | {row['ratio_p50']} | {row['same_answers']} |"
        for row in rows
    ]
    name = f"point-ids{'-' + args.label if args.label else ''}"
    save_result(name, {"points": args.points, "queries": len(questions), "rows": rows}, "\n".join(lines))


if __name__ == "__main__":
    main()
