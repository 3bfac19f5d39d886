"""BEIR question-set files: parsing, the refusals that name a file and line, the export round trip; and the
metrics ir-measures computes, against plain-Python definitions (bench/quality.py's)."""

from __future__ import annotations

import json
import math
import random

import pytest

from ragkb_api.evaluations.beir import Question, from_beir_files, from_json, parse_qrels, to_qrels_tsv, to_queries_jsonl
from ragkb_core.errors import InvalidInput
from ragkb_core.metrics import mean_scores, metric_names, score_queries

QUERIES = b'{"_id": "1", "text": "first question"}\n{"_id": "2", "text": "second"}\n{"_id": "3", "text": "unjudged"}\n'
QRELS = b"query-id\tcorpus-id\tscore\n1\tdoc-a\t1\n1\tdoc-b\t2\n2\tdoc-c\t1\n"


def test_a_beir_folder_keeps_the_judged_queries_in_file_order() -> None:
    judged = from_beir_files(QUERIES, QRELS, max_query_chars=100)
    assert judged.questions == [Question("1", "first question"), Question("2", "second")]
    assert judged.qrels == {"1": {"doc-a": 1, "doc-b": 2}, "2": {"doc-c": 1}}


def test_qrels_without_header_and_in_trec_columns_are_read() -> None:
    assert parse_qrels(b"1\tdoc-a\t1\n") == [(1, "1", "doc-a", 1)]
    assert parse_qrels(b"1 0 doc-a 2\n") == [(1, "1", "doc-a", 2)]


@pytest.mark.parametrize(
    ("queries", "qrels", "message"),
    [
        (b'{"_id": "1", "text": "q"}\nnot json\n', QRELS, "queries.jsonl line 2: not a JSON object"),
        (b'{"_id": "1"}\n', b"1\td\t1\n", "queries.jsonl line 1: needs a `text` string"),
        (b'{"text": "q"}\n', b"1\td\t1\n", "queries.jsonl line 1: needs an `_id`"),
        (b'{"_id": "1", "text": "q"}\n{"_id": "1", "text": "q"}\n', b"1\td\t1\n", "queries.jsonl line 2: query id"),
        (b'{"_id": "1", "text": "q"}\n', b"1\td\t1\n1\td\n", "qrels.tsv line 2: needs 3 tab-separated columns"),
        (b'{"_id": "1", "text": "q"}\n', b"1\td\tyes-ish\n1\td\tx\n", "qrels.tsv line 2: score must be an integer"),
        (b'{"_id": "1", "text": "q"}\n', b"1\td\t1\n9\td\t1\n", "qrels.tsv line 2: query '9' is not in queries"),
        (b'{"_id": "1", "text": "q"}\n', b"1\td\t99\n", "qrels.tsv line 1: the judgement: score must be between"),
        (b'{"_id": "1", "text": "' + b"x" * 101 + b'"}\n', b"1\td\t1\n", "queries.jsonl line 1: the text is longer"),
        (b'{"_id": "1", "text": "q"}\n', b"\xff\xfe\n", "qrels.tsv line 1: not UTF-8"),
        (b'{"_id": "1", "text": "q"}\n', b"", "no judged queries"),
    ],
)
def test_malformed_files_are_refused_naming_the_line(queries: bytes, qrels: bytes, message: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        from_beir_files(queries, qrels, max_query_chars=100)
    assert message in refused.value.detail


def test_the_json_form_needs_every_query_judged_and_every_judgement_a_query() -> None:
    questions = [Question("1", "q one"), Question("2", "q two")]
    with pytest.raises(InvalidInput, match="without any judgement in qrels: 2"):
        from_json(questions, {"1": {"d": 1}}, 100)
    with pytest.raises(InvalidInput, match="not in queries: 3"):
        from_json(questions, {"1": {"d": 1}, "2": {"d": 1}, "3": {"d": 1}}, 100)
    assert from_json(questions, {"1": {"d": 1}, "2": {"e": 0}}, 100).qrels["2"] == {"e": 0}


def test_an_export_reads_back_as_the_same_set() -> None:
    judged = from_beir_files(QUERIES, QRELS, max_query_chars=100)
    queries = to_queries_jsonl(judged.questions).encode()
    qrels = to_qrels_tsv(judged.questions, judged.qrels).encode()
    assert [json.loads(line)["_id"] for line in queries.splitlines()] == ["1", "2"]
    assert from_beir_files(queries, qrels, max_query_chars=100) == judged


def _ndcg_at_10(ranked: list[str], relevant: dict[str, int]) -> float:
    dcg = sum((2 ** relevant.get(doc, 0) - 1) / math.log2(i + 2) for i, doc in enumerate(ranked[:10]))
    ideal = sorted(relevant.values(), reverse=True)[:10]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def _recall(ranked: list[str], relevant: dict[str, int], k: int) -> float:
    positives = {doc for doc, grade in relevant.items() if grade > 0}
    return len(positives & set(ranked[:k])) / len(positives) if positives else 0.0


def _mrr_at_10(ranked: list[str], relevant: dict[str, int]) -> float:
    return next((1 / (i + 1) for i, doc in enumerate(ranked[:10]) if relevant.get(doc, 0) > 0), 0.0)


def test_the_metrics_are_bench_qualitys_definitions_with_graded_judgements() -> None:
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(60)]
    qrels = {f"q{n}": {doc: rng.choice([0, 1, 1, 2, 3]) for doc in rng.sample(docs, 6)} for n in range(100)}
    # Every seventh query got no answer at all: it scores 0 and still counts in the means.
    rankings = {query_id: rng.sample(docs, 40) for n, query_id in enumerate(qrels) if n % 7}
    scores = score_queries(qrels, rankings, depth=30)
    for query_id, relevant in qrels.items():
        ranked = rankings.get(query_id, [])
        assert scores[query_id]["ndcg@10"] == pytest.approx(_ndcg_at_10(ranked, relevant), abs=1e-12)
        assert scores[query_id]["recall@30"] == pytest.approx(_recall(ranked, relevant, 30), abs=1e-12)
        assert scores[query_id]["recall@100"] == pytest.approx(_recall(ranked, relevant, 100), abs=1e-12)
        assert scores[query_id]["mrr@10"] == pytest.approx(_mrr_at_10(ranked, relevant), abs=1e-12)
    means = mean_scores(scores, metric_names(30))
    expected = sum(_ndcg_at_10(rankings.get(q, []), r) for q, r in qrels.items()) / len(qrels)
    assert means["ndcg@10"] == pytest.approx(expected, abs=1e-12)
    assert metric_names(100) == ["ndcg@10", "recall@100", "mrr@10"]
