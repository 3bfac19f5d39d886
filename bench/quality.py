"""Retrieval quality per search mode over HTTP, on BEIR collections ingested with bench/ingest.py.

    python bench/quality.py [--corpora scifact:train jsquad:dev] [--max-queries N]
                            [--settings '{"keyword_weight": 1.5}'] [--label NAME]
                            [--kb-suffix=-int8-mixed] [--runs semantic hybrid]

For every query and run the service returns up to 100 passages; they are reduced to documents in rank order
(first passage wins) and scored with nDCG@10, Recall@100 and MRR@10. The runs per corpus, all in the same
process against the same live service:

- keyword, semantic, hybrid, hybrid without dense feedback (`feedback_passages` 0: what the KB's second
  retrieval round adds, see the README's Benchmarks), and hybrid+rerank (skipped when the server does not
  rerank: no reranker, or one that failed to load; a degraded answer is reported as such, never as a reranked
  one) on the KB bench/ingest.py made (`bench-<corpus>-<size>`).
  Asking for 100 passages, each leg reads 700 candidates (top_k × candidate_multiplier); `hybrid at the KB's
  top_k` asks for none, as a caller that sets no top_k does (12 by default: 84 candidates a leg), and gives
  the nDCG@10 such a caller is served (its Recall@100 is not measured);
  hybrid+rerank runs as a KB serves by default — top_k × candidate_multiplier fused candidates reranked, top_k
  returned — so its Recall@100 is not measured (null); its budget is lifted (`--rerank-settings` changes
  either), so the figure is the model's quality, not the machine's load at the time;
- keyword on `bench-<corpus>-char-bigram` when that KB exists: the plain character-bigram BM25 baseline
  (`bench/ingest.py --corpus jsquad --kb-name bench-jsquad-char-bigram --analyzer '{"japanese": "char-bigram"}'`);
- the keyword leg's peer, in this process on the same documents and queries: plain Lucene BM25 (`bm25s` with its
  English stemmer and stop words, bench/lucene_bm25.py) over whole documents; English only, it means little
  on Japanese (no `--no-bm25s`).

`--settings` applies retrieval overrides (the search API's `settings`) to every run: one parameter at a time
on the same question set. `--kb-suffix` measures other KBs of the same corpus (`bench/ingest.py --kb-name
bench-<corpus>-<documents><suffix>`, e.g. another passage precision), `--runs` only the runs named.

The results keep every question's nDCG@10, so that `--compare BASELINE CANDIDATE` (two results files; measures
nothing) gives per corpus and run the candidate's mean difference with its 95 % paired bootstrap interval: on a
few hundred questions a difference of 0.003 is often noise, and the interval says when it is not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lucene_bm25
from common import DATA, client, find_kb, ndcg_at_k, read_jsonl, read_qrels, save_result

from ragkb_core.tuning import paired_bootstrap_interval

DEPTH = 100
PER_QUERY = "ndcg@10 per query"


# Dense feedback as an English KB opts in to it (off by default; kb_settings.FEEDBACK_DEFAULTS).
WITH_FEEDBACK: dict[str, Any] = {"feedback_passages": 2}

# The reranked run is measured for quality: a busy benchmark machine must not turn it into the fused order.
RERANK_SETTINGS: dict[str, Any] = {"rerank": True, "rerank_budget_ms": 60_000}


@dataclass(frozen=True)
class Run:
    name: str
    kb_name: str
    mode: str
    settings: dict[str, Any]
    # Passages asked for; None: the KB's own top_k (what it serves), too few for Recall@100.
    depth: int | None = DEPTH


def recall_at_100(ranked: list[str], relevant: dict[str, int]) -> float:
    positives = {doc for doc, grade in relevant.items() if grade > 0}
    return len(positives & set(ranked[:100])) / len(positives) if positives else 0.0


def mrr_at_10(ranked: list[str], relevant: dict[str, int]) -> float:
    return next((1 / (i + 1) for i, doc in enumerate(ranked[:10]) if relevant.get(doc, 0) > 0), 0.0)


def evaluate(
    http: Any, kb_id: str, queries: list[dict[str, Any]], qrels: dict[str, dict[str, int]], run: Run
) -> dict[str, Any]:
    scores: dict[str, list[float]] = {"ndcg@10": [], "recall@100": [], "mrr@10": []}
    took: list[float] = []
    degraded: set[str] = set()
    for query in queries:
        body = {
            "query": query["text"],
            "knowledge_base_ids": [kb_id],
            "mode": run.mode,
            "settings": ({"top_k": run.depth, "max_blocks": run.depth} if run.depth else {}) | run.settings,
        }
        response = http.post("/v1/search", json=body)
        response.raise_for_status()
        result = response.json()
        took.append(result["took_ms"])
        if result["degraded"]:
            degraded.add(result["degraded_reason"])
        ranked = list(dict.fromkeys(hit["source_id"] for hit in result["results"]))
        relevant = qrels[query["_id"]]
        scores["ndcg@10"].append(ndcg_at_k(ranked, relevant, 10))
        scores["recall@100"].append(recall_at_100(ranked, relevant))
        scores["mrr@10"].append(mrr_at_10(ranked, relevant))
    summary: dict[str, float | None] = {metric: round(statistics.fmean(values), 4) for metric, values in scores.items()}
    if run.depth is None or run.depth < 100:
        summary["recall@100"] = None
    return {
        "run": run.name,
        "kb": run.kb_name,
        **summary,
        "server_ms_p50": round(statistics.median(took), 1),
        "degraded": sorted(degraded),
        # Per question, so that two results files can be compared question by question (--compare).
        PER_QUERY: {query["_id"]: round(value, 6) for query, value in zip(queries, scores["ndcg@10"], strict=True)},
    }


def evaluate_bm25s(corpus: str, queries: list[dict[str, Any]], qrels: dict[str, dict[str, int]]) -> dict[str, Any]:
    documents = list(read_jsonl(DATA / corpus / "corpus.jsonl"))
    ranked = lucene_bm25.rankings(documents, [query["text"] for query in queries], DEPTH)
    scores: dict[str, list[float]] = {"ndcg@10": [], "recall@100": [], "mrr@10": []}
    for found, query in zip(ranked, queries, strict=True):
        relevant = qrels[query["_id"]]
        scores["ndcg@10"].append(ndcg_at_k(found, relevant, 10))
        scores["recall@100"].append(recall_at_100(found, relevant))
        scores["mrr@10"].append(mrr_at_10(found, relevant))
    summary = {metric: round(statistics.fmean(values), 4) for metric, values in scores.items()}
    return {"run": "keyword peer: " + lucene_bm25.NAME, "kb": None, **summary, "server_ms_p50": None, "degraded": []}


def reranks(http: Any, kb_id: str, query: str) -> bool:
    """Whether the server reranks a hybrid answer of this KB (it has a reranker, and it loaded)."""
    body = {"query": query, "knowledge_base_ids": [kb_id], "mode": "hybrid", "settings": RERANK_SETTINGS}
    response = http.post("/v1/search", json=body)
    response.raise_for_status()
    return bool(response.json().get("reranked"))


def runs_for(
    http: Any, corpus: str, main_kb: str, settings: dict[str, Any], rerank_settings: dict[str, Any] | None
) -> list[Run]:
    # The plain modes never rerank, whatever the server's default: each is measured as its own stage.
    plain = {"rerank": False, **settings}
    runs = [
        Run("keyword", main_kb, "keyword", plain),
        Run("semantic", main_kb, "semantic", plain),
        Run("hybrid", main_kb, "hybrid", plain),
        # What dense feedback (a second retrieval round, a KB's opt-in) adds to the same hybrid search.
        Run("hybrid + feedback", main_kb, "hybrid", plain | WITH_FEEDBACK),
        # The runs above ask for 100 passages, so each leg reads 700 candidates (top_k × candidate_multiplier); a
        # search at the KB's own top_k (12 by default: 84 a leg) is what a caller that sets none is answered.
        Run("hybrid at the KB's top_k", main_kb, "hybrid", plain, None),
    ]
    if rerank_settings is not None:
        runs.append(Run("hybrid+rerank", main_kb, "hybrid", settings | RERANK_SETTINGS | rerank_settings, None))
    baseline = f"bench-{corpus}-char-bigram"
    if find_kb(http, baseline) is not None:
        runs.append(Run("keyword (char-bigram BM25)", baseline, "keyword", plain))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--corpora", nargs="+", default=["scifact:train", "jsquad:dev"])
    parser.add_argument("--max-queries", type=int, default=None, help="evaluate only the first N judged queries")
    parser.add_argument("--settings", type=json.loads, default={}, help="retrieval overrides for every run (JSON)")
    parser.add_argument("--no-rerank", action="store_true", help="skip the hybrid+rerank run")
    parser.add_argument(
        "--rerank-settings", type=json.loads, default={}, help="more overrides for the hybrid+rerank run (JSON)"
    )
    parser.add_argument("--label", default="", help="a name for this configuration in the results file")
    parser.add_argument("--no-bm25s", action="store_true", help="skip the plain Lucene BM25 (bm25s) peer")
    parser.add_argument(
        "--kb-suffix",
        default="",
        help="measure the KBs named bench-<corpus>-<documents><suffix> (bench/ingest.py --kb-name), e.g. -int8",
    )
    parser.add_argument("--runs", nargs="+", default=None, help="only these runs, by name (e.g. semantic hybrid)")
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("BASELINE", "CANDIDATE"),
        help="measure nothing: compare two results files of this script question by question (paired bootstrap)",
    )
    args = parser.parse_args()
    if args.compare:
        compare_files(args.compare, args.label)
        return
    http = client(args.url)
    rows = []
    for spec in args.corpora:
        corpus, split = spec.split(":")
        size = sum(1 for _ in read_jsonl(DATA / corpus / "corpus.jsonl"))
        qrels = read_qrels(DATA / corpus / "qrels" / f"{split}.tsv")
        queries = [q for q in read_jsonl(DATA / corpus / "queries.jsonl") if q["_id"] in qrels][: args.max_queries]
        rerank_settings = None if args.no_rerank else args.rerank_settings
        main_kb = f"bench-{corpus}-{size}{args.kb_suffix}"
        for run in chosen(runs_for(http, corpus, main_kb, args.settings, rerank_settings), args.runs):
            kb = find_kb(http, run.kb_name)
            if kb is None:
                raise SystemExit(f"no KB {run.kb_name}: run bench/ingest.py --corpus {corpus} first")
            if run.settings.get("rerank") and not reranks(http, kb["id"], queries[0]["text"]):
                print(f"{run.name}: skipped (the answer was not reranked: no reranker on the server)", flush=True)
                continue
            started = time.perf_counter()
            row = {
                "corpus": corpus,
                "split": split,
                "queries": len(queries),
                **evaluate(http, kb["id"], queries, qrels, run),
            }
            row["seconds"] = round(time.perf_counter() - started, 1)
            rows.append(row)
            print({key: value for key, value in row.items() if key != PER_QUERY}, flush=True)
        if not args.no_bm25s:
            started = time.perf_counter()
            row = {"corpus": corpus, "split": split, "queries": len(queries), **evaluate_bm25s(corpus, queries, qrels)}
            row["seconds"] = round(time.perf_counter() - started, 1)
            rows.append(row)
            print(row, flush=True)
    name = f"quality-{args.label}" if args.label else "quality"
    result = {"settings": args.settings, "rerank_settings": args.rerank_settings, "rows": rows}
    save_result(name, result, markdown(rows))


def chosen(runs: list[Run], names: list[str] | None) -> list[Run]:
    """The runs named (all for None); a name that is no run is an error, not an empty measurement."""
    if names is None:
        return runs
    if unknown := set(names) - {run.name for run in runs}:
        raise SystemExit(f"no run named {sorted(unknown)}; the runs: {[run.name for run in runs]}")
    return [run for run in runs if run.name in names]


def compare_files(paths: list[str], label: str) -> None:
    baseline, candidate = (json.loads(Path(path).read_text(encoding="utf-8")) for path in paths)
    table = comparison(baseline["rows"], candidate["rows"])
    if label:  # saved and printed
        save_result(f"quality-compare-{label}", {"compared": paths, "table": table}, table)
    else:
        print(table)


def comparison(baseline: list[dict[str, Any]], candidate: list[dict[str, Any]]) -> str:
    """nDCG@10 of the runs both files measured on the same questions: the candidate's mean difference and its
    95 % paired bootstrap interval (ragkb_core.tuning's, as the tune job reports a gain)."""
    lines = ["| corpus | run | questions | baseline | candidate | Δ [95 % CI] |", "|---|---|---|---|---|---|"]
    measured = {(row["corpus"], row["run"]): row[PER_QUERY] for row in baseline if PER_QUERY in row}
    for row in candidate:
        before = measured.get((row["corpus"], row["run"]))
        if before is None or PER_QUERY not in row or set(before) != set(row[PER_QUERY]):
            continue
        after = row[PER_QUERY]
        differences = [after[query] - before[query] for query in before]
        low, high = paired_bootstrap_interval(differences, seed=0)
        lines.append(
            f"| {row['corpus']} | {row['run']} | {len(before)} | {statistics.fmean(before.values()):.4f} | "
            f"{statistics.fmean(after.values()):.4f} | {statistics.fmean(differences):+.4f} [{low:+.4f}, {high:+.4f}] |"
        )
    return "\n".join(lines)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| corpus | queries | run | nDCG@10 | Recall@100 | MRR@10 | server p50 ms | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        note = ("degraded: " + "; ".join(r["degraded"])) if r["degraded"] else ""
        recall = "–" if r["recall@100"] is None else r["recall@100"]
        server = "–" if r["server_ms_p50"] is None else r["server_ms_p50"]
        lines.append(
            f"| {r['corpus']} ({r['split']}) | {r['queries']} | {r['run']} | {r['ndcg@10']} | {recall} | "
            f"{r['mrr@10']} | {server} | {note} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
