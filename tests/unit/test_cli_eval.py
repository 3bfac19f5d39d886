"""`ragkb eval import` and `ragkb eval run` against a hand-written fake of the public API (httpx.MockTransport)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragkb_cli.__main__ import main
from ragkb_cli.api import ApiClient
from ragkb_cli.evaluate import batched, metric_lines, upload_corpus

KEY = "test-key"
KB = {"id": "kb1", "name": "scifact", "document_counts": {}}
REFUSED = {"status": 413, "title": "Payload too large", "detail": "the document is larger than 2097152 bytes"}
RESULT = {
    "mode": "hybrid",
    "settings": {"rerank": False},
    "metrics": {"ndcg@10": 0.7, "recall@100": 0.9, "mrr@10": 0.65},
    "queries": 2,
    "depth": 100,
    "took_ms": 50.0,
    "compare": {
        "mode": "keyword",
        "settings": {"rerank": None},
        "metrics": {"ndcg@10": 0.6, "recall@100": 0.8, "mrr@10": 0.6},
        "per_metric": {
            name: {"delta": -0.1, "wins": 0, "losses": 2, "ties": 0} for name in ("ndcg@10", "recall@100", "mrr@10")
        },
    },
}


class FakeApi:
    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.refuse = refuse  # source ids whose batch item the server refuses
        self.documents: list[dict[str, Any]] = []
        self.question_sets: list[dict[str, Any]] = []
        self.evaluations: list[dict[str, Any]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/knowledge-bases":
            return httpx.Response(200, json=[KB])
        if path == "/v1/knowledge-bases/kb1/documents/batch":
            items = json.loads(request.content)["documents"]
            self.documents += items
            results = [
                {"index": i, "source_id": item["source_id"], "document": None, "error": None}
                | ({"error": REFUSED} if item["source_id"] in self.refuse else {"document": {"id": f"doc{i}"}})
                for i, item in enumerate(items)
            ]
            return httpx.Response(200, json={"results": results})
        if path == "/v1/knowledge-bases/kb1/question-sets" and request.method == "POST":
            body = request.read()
            self.question_sets.append({"body": body})
            created = {"id": "set1", "name": "scifact-train", "query_count": 2, "judgement_count": 3}
            return httpx.Response(201, json=created)
        if path == "/v1/knowledge-bases/kb1/question-sets":
            return httpx.Response(200, json=[{"id": "set1", "name": "scifact-train"}])
        if path == "/v1/knowledge-bases/kb1/evaluations":
            self.evaluations.append(json.loads(request.content))
            return httpx.Response(200, json=RESULT)
        return httpx.Response(404, json={"title": "Not found", "detail": path})


@pytest.fixture
def beir_folder(tmp_path: Path) -> Path:
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(
        '{"_id": "d1", "title": "One", "text": "first"}\n{"_id": "d2", "title": "", "text": "second"}\n'
    )
    (tmp_path / "queries.jsonl").write_text('{"_id": "1", "text": "q"}\n')
    (tmp_path / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n1\td1\t1\n")
    return tmp_path


def test_eval_import_uploads_the_corpus_and_the_splits_qrels(beir_folder: Path, capsys: Any) -> None:
    fake = FakeApi()
    argv = ["--key", KEY, "eval", "import", str(beir_folder), "--kb", "scifact", "--split", "train", "--with-corpus"]
    assert main(argv, transport=httpx.MockTransport(fake.handle)) == 0
    assert sorted((d["source_id"], d["title"]) for d in fake.documents) == [("d1", "One"), ("d2", "d2")]
    body = fake.question_sets[0]["body"]
    assert b'name="name"' in body and b"1\td1\t1" in body and b'"_id": "1"' in body
    assert "2 queries, 3 judgements" in capsys.readouterr().out


def test_eval_import_reports_each_refused_document_and_exits_1(beir_folder: Path, capsys: Any) -> None:
    fake = FakeApi(refuse=frozenset({"d2"}))
    argv = ["--key", KEY, "eval", "import", str(beir_folder), "--kb", "scifact", "--split", "train", "--with-corpus"]
    assert main(argv, transport=httpx.MockTransport(fake.handle)) == 1
    captured = capsys.readouterr()
    assert "corpus: uploaded 1, failed 1" in captured.out
    assert "failed d2: Payload too large: the document is larger than 2097152 bytes" in captured.err


def test_upload_corpus_sends_batches_in_order(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"t{i}"}) + "\n" for i in range(120)))
    fake = FakeApi()
    with ApiClient("http://ragkb.test", KEY, transport=httpx.MockTransport(fake.handle)) as api:
        report = upload_corpus(api, "kb1", corpus, concurrency=1)
    assert report.uploaded == 120 and not report.failures
    assert [d["source_id"] for d in fake.documents] == [f"d{i}" for i in range(120)]
    assert list(batched(range(5), 2)) == [[0, 1], [2, 3], [4]]


def test_eval_import_refuses_a_folder_without_that_split(beir_folder: Path, capsys: Any) -> None:
    argv = ["--key", KEY, "eval", "import", str(beir_folder), "--kb", "scifact", "--split", "dev"]
    assert main(argv, transport=httpx.MockTransport(FakeApi().handle)) == 2
    assert "dev.tsv" in capsys.readouterr().err


def test_eval_run_sends_both_runs_and_prints_the_comparison(capsys: Any) -> None:
    fake = FakeApi()
    argv = ["--key", KEY, "eval", "run", "--kb", "scifact", "--set", "scifact-train", "--mode", "hybrid"]
    argv += ["--settings", '{"rerank": false}', "--compare-mode", "keyword", "--max-queries", "5"]
    assert main(argv, transport=httpx.MockTransport(fake.handle)) == 0
    assert fake.evaluations == [
        {
            "question_set_id": "set1",
            "settings": {"rerank": False},
            "depth": 100,
            "mode": "hybrid",
            "max_queries": 5,
            "compare": {"settings": {}, "mode": "keyword"},
        }
    ]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["RUN", "ndcg@10", "recall@100", "mrr@10"]
    assert lines[1].split() == ["hybrid", "(rerank", "false)", "0.7000", "0.9000", "0.6500"]
    assert lines[2].split() == ["keyword", "0.6000", "0.8000", "0.6000"]  # a None setting is not an override
    assert lines[3].split() == ["delta", "-0.1000", "-0.1000", "-0.1000"]
    assert lines[4].split() == ["wins/losses/ties", "0/2/0", "0/2/0", "0/2/0"]


def test_run_labels_show_every_overridden_setting() -> None:
    rrf = {"mode": "hybrid", "settings": {"rerank": False, "fusion": "rrf"}}
    result = RESULT | {"compare": RESULT["compare"] | rrf}
    lines = metric_lines(result)
    assert lines[1].startswith("hybrid (rerank false) ")
    assert lines[2].startswith("hybrid (rerank false, fusion rrf) ")
