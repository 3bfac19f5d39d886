"""The keyword leg alone, per analyzer configuration, offline (no service): which analyzer to index with.

    python bench/analyzers.py [--corpora jsquad:dev scifact:train] [--max-queries N] [--length-ablation]
                              [--variants NAME ...]

BM25 is computed as the engine computes it: document weights from Bm25Encoder.encode_document (the server's
default k1, b and avg_len), on the text the worker indexes — "title > heading path" + newline + chunk text,
which for a whole BEIR document (one chunk, no headings) is title + newline + text, with the title counted as
often as the analyzer's title_weight says; query weight 1 per
distinct term (encode_query); IDF ln((N − n + 0.5)/(n + 0.5) + 1) over term ids, as Qdrant's IDF modifier.
Only documents sharing a term with the query are ranked (as a sparse search returns them). Reports
nDCG@10, Recall@100 and MRR@10, the index build time (analysis + encoding of the corpus) and the index's
distinct terms and postings, plus paired bootstrap 95% intervals of the nDCG@10 difference against the
version 1 analyzer (every KB created before version 2 has it) and against plain Lucene BM25 (`bm25s` with its
English stemmer and stop words, bench/lucene_bm25.py), which runs on the same documents in the same run.
--length-ablation adds rows where the BM25 length counts every term, extra recall terms included (the
encoder counts word terms only).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import lucene_bm25
import numpy as np
from common import DATA, ndcg_at_k, read_jsonl, read_qrels, save_result
from numpy.typing import NDArray
from quality import mrr_at_10, recall_at_100

from ragkb_analyzer import Analysis, Analyzer, Bm25Encoder, shared_dictionary
from ragkb_core.contracts import SparseTerms
from ragkb_core.kb_settings import KbAnalyzer
from ragkb_core.settings import AnalyzerSettings

VARIANTS: dict[str, KbAnalyzer] = {
    "v1 (ascii-lower, sudachi+bigram)": KbAnalyzer(words="ascii-lower"),
    "v2 (default)": KbAnalyzer(),
    "v2 title once": KbAnalyzer(title_weight=1),
    "v2 no stop words": KbAnalyzer(stop_words=False),
    "v2 no stemming": KbAnalyzer(languages=[]),
    "v2 sudachi alone": KbAnalyzer(char_bigrams=False),
    "v2 sudachi+mode-a+bigram": KbAnalyzer(sudachi_mode_a_subwords=True),
    "v2 char-bigram": KbAnalyzer(japanese="char-bigram"),
}
BASELINES = ("v1 (ascii-lower, sudachi+bigram)", lucene_bm25.NAME)
DEPTH = 100
BOOTSTRAP_SAMPLES = 2000


class AllTermsLength(Analyzer):
    """The ablation: BM25 length counts extra recall terms too."""

    def analyze(self, text: str) -> Analysis:
        analysis = super().analyze(text)
        return Analysis(analysis.terms, len(analysis.terms))


class KeywordIndex:
    """An inverted index of encoded documents, scored with the engine's IDF."""

    def __init__(self, vectors: list[SparseTerms]) -> None:
        self.size = len(vectors)
        postings: dict[int, tuple[list[int], list[float]]] = {}
        for doc, vector in enumerate(vectors):
            for term, weight in zip(vector.indices, vector.values, strict=True):
                docs, weights = postings.setdefault(term, ([], []))
                docs.append(doc)
                weights.append(weight)
        self.postings = {term: (np.array(d), self._idf(len(d)) * np.array(w)) for term, (d, w) in postings.items()}
        self.entries = sum(len(docs) for docs, _ in postings.values())

    def _idf(self, n: int) -> float:
        return float(np.log((self.size - n + 0.5) / (n + 0.5) + 1))

    def search(self, query: SparseTerms) -> list[int]:
        scores: NDArray[np.float64] = np.zeros(self.size)
        matched: NDArray[np.bool_] = np.zeros(self.size, dtype=bool)
        for term, weight in zip(query.indices, query.values, strict=True):
            if (posting := self.postings.get(term)) is not None:
                scores[posting[0]] += weight * posting[1]
                matched[posting[0]] = True
        candidates = np.flatnonzero(matched)
        # Highest score first; ties by document order, so that runs are repeatable.
        order = np.lexsort((candidates, -scores[candidates]))[:DEPTH]
        return [int(doc) for doc in candidates[order]]


def evaluate(
    name: str, encoder: Bm25Encoder, corpus: list[dict[str, Any]], queries: list[dict[str, Any]], qrels: Any
) -> tuple[dict[str, Any], list[float]]:
    started = time.perf_counter()
    index = KeywordIndex([encoder.encode_document(f"{doc['title']}\n{doc['text']}", doc["title"]) for doc in corpus])
    build_s = time.perf_counter() - started
    ids = [doc["_id"] for doc in corpus]
    started = time.perf_counter()
    ranked = [[ids[doc] for doc in index.search(encoder.encode_query(query["text"]))] for query in queries]
    search_s = time.perf_counter() - started
    scores = metrics(ranked, queries, qrels)
    row = {
        "analyzer": name,
        "version": encoder.version,
        **{metric: round(statistics.fmean(values), 4) for metric, values in scores.items()},
        "build_s": round(build_s, 1),
        "query_ms": round(1000 * search_s / len(queries), 2),
        "terms": len(index.postings),
        "postings_per_doc": round(index.entries / index.size, 1),
    }
    return row, scores["ndcg@10"]


def evaluate_bm25s(
    corpus: list[dict[str, Any]], queries: list[dict[str, Any]], qrels: Any
) -> tuple[dict[str, Any], list[float]]:
    started = time.perf_counter()
    ranked = lucene_bm25.rankings(corpus, [query["text"] for query in queries], DEPTH)
    seconds = time.perf_counter() - started
    scores = metrics(ranked, queries, qrels)
    row = {
        "analyzer": lucene_bm25.NAME,
        "version": "bm25s",
        **{metric: round(statistics.fmean(values), 4) for metric, values in scores.items()},
        "build_s": round(seconds, 1),
        "query_ms": None,
        "terms": None,
        "postings_per_doc": None,
    }
    return row, scores["ndcg@10"]


def metrics(ranked: list[list[str]], queries: list[dict[str, Any]], qrels: Any) -> dict[str, list[float]]:
    scores: dict[str, list[float]] = {"ndcg@10": [], "recall@100": [], "mrr@10": []}
    for found, query in zip(ranked, queries, strict=True):
        relevant = qrels[query["_id"]]
        scores["ndcg@10"].append(ndcg_at_k(found, relevant, 10))
        scores["recall@100"].append(recall_at_100(found, relevant))
        scores["mrr@10"].append(mrr_at_10(found, relevant))
    return scores


def paired_interval(ours: list[float], theirs: list[float], seed: int = 7) -> tuple[float, float, float]:
    """Mean per-query difference and its bootstrap 95% interval."""
    differences = np.array(ours) - np.array(theirs)
    rng = np.random.default_rng(seed)
    samples = rng.integers(0, len(differences), size=(BOOTSTRAP_SAMPLES, len(differences)))
    means = differences[samples].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return round(float(differences.mean()), 4), round(float(low), 4), round(float(high), 4)


def encoders(settings: AnalyzerSettings, length_ablation: bool, names: list[str]) -> dict[str, Bm25Encoder]:
    chosen = {name: config for name, config in VARIANTS.items() if name in names}
    made = {name: Bm25Encoder(Analyzer(config), settings) for name, config in chosen.items()}
    if length_ablation:
        for name, config in chosen.items():
            if config.sudachi_mode_a_subwords or config.char_bigrams:
                made[f"{name} (len=all terms)"] = Bm25Encoder(AllTermsLength(config), settings)
    return made


def run_corpus(spec: str, made: dict[str, Bm25Encoder], max_queries: int | None) -> list[dict[str, Any]]:
    corpus_name, split = spec.split(":")
    corpus = list(read_jsonl(DATA / corpus_name / "corpus.jsonl"))
    qrels = read_qrels(DATA / corpus_name / "qrels" / f"{split}.tsv")
    queries = [q for q in read_jsonl(DATA / corpus_name / "queries.jsonl") if q["_id"] in qrels][:max_queries]
    measured = [evaluate(name, encoder, corpus, queries, qrels) for name, encoder in made.items()]
    measured.append(evaluate_bm25s(corpus, queries, qrels))
    rows, per_query = [], {}
    for row, ndcg in measured:
        per_query[row["analyzer"]] = ndcg
        rows.append({"corpus": corpus_name, "split": split, "docs": len(corpus), "queries": len(queries), **row})
        print(rows[-1], flush=True)
    for row in rows:
        row["ndcg_vs"] = {
            baseline: paired_interval(per_query[row["analyzer"]], per_query[baseline])
            for baseline in BASELINES
            if baseline in per_query
        }
    return rows


def markdown(rows: list[dict[str, Any]], settings: AnalyzerSettings) -> str:
    lines = [
        f"Keyword leg alone, BM25 with each analyzer's k1 and b, avg_len={settings.avg_len} (bench/analyzers.py)",
        "",
        "| corpus | analyzer | nDCG@10 | Recall@100 | MRR@10 | ΔnDCG@10 vs v1 [95% CI] | ΔnDCG@10 vs bm25s [95% CI] "
        "| build s | query ms | terms | postings/doc |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        deltas = " | ".join(_delta(r["ndcg_vs"].get(baseline)) for baseline in BASELINES)
        lines.append(
            f"| {r['corpus']} ({r['split']}, {r['queries']} q) | {r['analyzer']} | {r['ndcg@10']} | "
            f"{r['recall@100']} | {r['mrr@10']} | {deltas} | {r['build_s']} | "
            f"{r['query_ms']} | {r['terms']} | {r['postings_per_doc']} |"
        )
    return "\n".join(lines) + "\n"


def _delta(interval: tuple[float, float, float] | None) -> str:
    if interval is None:
        return "–"
    delta, low, high = interval
    return f"{delta:+.4f} [{low:+.4f}, {high:+.4f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", nargs="+", default=["jsquad:dev", "scifact:train"])
    parser.add_argument("--max-queries", type=int, default=None, help="evaluate only the first N judged queries")
    parser.add_argument("--length-ablation", action="store_true", help="also rows with BM25 length = all terms")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), help="analyzer variants (default: all)")
    args = parser.parse_args()
    settings = AnalyzerSettings()
    shared_dictionary()  # loaded before the clock starts: build times are of analysis and encoding only
    made = encoders(settings, args.length_ablation, args.variants)
    rows = [row for spec in args.corpora for row in run_corpus(spec, made, args.max_queries)]
    save_result("analyzers", {"settings": settings.model_dump(), "rows": rows}, markdown(rows, settings))


if __name__ == "__main__":
    main()
