"""bench/plots.py: result files of the shapes the benchmark scripts write (built with the scripts' own functions
and save_result, into a temporary folder) become one PNG per kind, with a bar per corpus × run, per scale ×
mode, per corpus × system; kinds without a file are skipped and said so."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("matplotlib", reason="matplotlib is a bench-only dependency (bench/requirements-plots.txt)")

from matplotlib.axes import Axes
from matplotlib.container import BarContainer

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimpleNamespace:
    """The bench scripts as modules, with save_result writing into tmp_path."""
    monkeypatch.syspath_prepend(str(BENCH))
    names = ("common", "plots", "quality", "query", "ingest", "peers", "rerank_latency")
    modules: dict[str, ModuleType] = {name: importlib.import_module(name) for name in names}
    monkeypatch.setattr(modules["common"], "RESULTS", tmp_path)
    return SimpleNamespace(**modules)


def bars(axis: Axes) -> int:
    return sum(len(container.patches) for container in axis.containers if isinstance(container, BarContainer))


class Answer:
    def __init__(self, body: Any) -> None:
        self._body = body

    def raise_for_status(self) -> None:
        return None

    def json(self) -> Any:
        return self._body


class FakeService:
    """Answers bench/quality.py's requests: the KB list, and searches whose ranking depends on the mode."""

    def __init__(self, kbs: list[str], degraded_when_reranked: bool = False) -> None:
        self._kbs = kbs
        self._degraded = degraded_when_reranked

    def get(self, path: str) -> Answer:
        assert path == "/v1/knowledge-bases"
        return Answer([{"name": name, "id": name} for name in self._kbs])

    def post(self, path: str, json: dict[str, Any]) -> Answer:
        assert path == "/v1/search"
        reranked = json["settings"].get("rerank") is True
        ranked = {"keyword": ["d2", "d1"], "semantic": ["d1", "d3"], "hybrid": ["d1", "d2"]}[json["mode"]]
        degraded = reranked and self._degraded
        return Answer(
            {
                "took_ms": 12.0,
                "degraded": degraded,
                "degraded_reason": "rerank budget exceeded" if degraded else None,
                "results": [{"source_id": doc} for doc in ranked],
            }
        )


def write_quality(bench: SimpleNamespace) -> None:
    rows = []
    queries = [{"_id": "q1", "text": "a question"}, {"_id": "q2", "text": "another"}]
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}}
    # scifact: the five runs; jsquad: also the char-bigram baseline, and its reranked run answers degraded.
    for corpus, split, kbs in (("scifact", "train", []), ("jsquad", "dev", ["bench-jsquad-char-bigram"])):
        http = FakeService(kbs, degraded_when_reranked=corpus == "jsquad")
        for run in bench.quality.runs_for(http, corpus, 10, {}, {}):
            row = {"corpus": corpus, "split": split, "queries": len(queries)}
            row |= bench.quality.evaluate(http, run.kb_name, queries, qrels, run) | {"seconds": 0.1}
            rows.append(row)
    bench.common.save_result("quality", {"settings": {}, "rerank_settings": {}, "rows": rows})


def write_query_latency(bench: SimpleNamespace) -> None:
    def summary(ms: float) -> dict[str, Any]:
        samples = bench.query.Samples()
        for i in range(20):
            samples.add(ms + i, {"took_ms": ms, "timings_ms": {"embed": 1.0, "retrieve": ms / 2}, "reranked": False})
        return dict(bench.query.summary(samples))

    scales = []
    # hybrid+rerank only at 10k (at 100k the server had no reranker): 3 + 4 bars per panel.
    for points, modes in ((10_000, bench.query.MODES), (100_000, bench.query.MODES[:3])):
        rows = [
            {
                "mode": mode.label,
                "single": summary(10.0 * (i + 1)),
                "concurrent": {"clients": 8, "queries_per_s": 100.0 / (i + 1), **summary(20.0 * (i + 1))},
            }
            for i, mode in enumerate(modes)
        ]
        scales.append({"points": points, "kb_id": "kb", "write_s": 1.0, "optimize_wait": {}, "modes": rows})
    result = {"corpus": "SciFact scaled up", "queries_per_mode": 20, "top_k": 10, "scales": scales}
    bench.common.save_result("query-latency", result)


def write_ingest(bench: SimpleNamespace) -> None:
    documents = [
        {"chunk_count": 3, "stage_timings": {"parse": 0.1, "chunk": 0.1, "embed": 0.7, "index": 0.1}},
        {"chunk_count": 2, "stage_timings": {"parse": 0.2, "chunk": 0.1, "embed": 0.6, "index": 0.1}},
    ]
    # bench/processes.py's summary of a stack of one api, one retriever and two worker processes.
    rows = [
        (1, "ragkb_api", 110.0),
        (2, "ragkb_retriever", 1300.0),
        (3, "ragkb_worker", 120.0),
        (4, "ragkb_worker", 1200.0),
    ]
    processes = [
        {"pid": pid, "role": role, "rss_mb_start": pss, "rss_mb_peak": pss, "rss_mb_end": pss, "pss_mb_peak": pss}
        for pid, role, pss in rows
    ]
    totals = {"ragkb_api": 110.0, "ragkb_retriever": 1300.0, "ragkb_worker": 1320.0}
    memory = {"interval_s": 1.0, "processes": processes, "pss_mb_peak_by_role": totals}
    for name, raw in (("bench-scifact-5183", {"chunks": 1000, "seconds": 10.0, "chunks_per_s": 100.0}), ("b", None)):
        # bench/ingest.py's result, key for key; the second KB was ingested with --skip-raw.
        result = {
            "corpus": "scifact",
            "knowledge_base": name,
            "knowledge_base_id": "kb",
            "analyzer": {},
            "documents": 2,
            "counts": {"done": 2, "failed": 0, "pending": 0, "processing": 0},
            "chunks": 5,
            "upload_seconds": 0.1,
            "seconds": 0.5,
            "documents_per_s": 4.0,
            "chunks_per_s": 10.0,
            "raw_encode": raw,
            "efficiency": None if raw is None else 0.1,
            "stage_share": bench.ingest.stage_shares(documents),
            "process_memory": memory if raw else {"unavailable": "no ragkb process listens on port 8000"},
        }
        bench.common.save_result(f"ingest-{name}", result, bench.ingest.markdown(result))
    # bench/formats.py's rows, key for key.
    formats = [
        {
            "format": extension,
            "files": 30,
            "failed": 0,
            "megabytes": 1.5,
            "pages": 60 if extension == "pdf" else None,
            "chunks": 90,
            "seconds": 9.0,
            "chunks_per_s": 10.0,
            "pages_per_s": 6.67 if extension == "pdf" else None,
            "parse_pages_per_s": 20.0 if extension == "pdf" else None,
            "stage_share": {"parse": 0.3, "chunk": 0.1, "embed": 0.5, "index": 0.1},
        }
        for extension in ("pdf", "docx", "md")
    ]
    bench.common.save_result("ingest-formats", {"files_per_format": 30, "formats": formats})


def write_peers(bench: SimpleNamespace) -> None:
    latency = bench.peers.latency
    build = {"documents": 100, "seconds": 1.0, "documents_per_s": 100.0}
    ragkb = {
        "system": "ragkb",
        "version": "abc1234",
        "hybrid": "Sudachi BM25 + dense (Qdrant), DBSF, no reranker",
        "kb": "bench-scifact-5183",
        "ndcg@10": 0.7,
        "recall@100": 0.9,
        "mrr@10": 0.65,
        "latency_ms": latency([20.0, 25.0, 30.0]),
        "server_took_ms": latency([15.0, 18.0]),
        "server_embed_ms": latency([5.0, 6.0]),
        "keyword_leg_matched": 1.0,
        # The same documents as the peers', once per passage precision: the bar is the first's.
        "ingest": [
            {"passage_precision": precision, "documents": 100, "failed": 0, "seconds": 2.0, "documents_per_s": rate}
            for precision, rate in (("float32", 50.0), ("int8-mixed", 80.0))
        ],
    }
    peers = [
        {
            "system": name,
            "version": "1.0",
            "hybrid": "dense",
            "ndcg@10": 0.6,
            "recall@100": 0.8,
            "mrr@10": 0.55,
            "latency_ms": latency([8.0, 9.0]),
            "search_only_ms": latency([2.0, 3.0]),
            "keyword_leg_matched": None,
            "index_only": build,
            "ingest_with_embedding": build,
        }
        for name in ("txtai", "lancedb", "chroma")
    ]
    corpus = {
        "corpus": "scifact",
        "split": "train",
        "documents": 5183,
        "queries": 809,
        "query_embed_ms": latency([5.0, 6.0]),
        "systems": [ragkb, *peers],
    }
    bench.common.save_result("peers", {"embedding": "ragkb EmbeddingSettings()", "corpora": [corpus]})


def write_rerank_latency(bench: SimpleNamespace) -> None:
    rows = [
        bench.rerank_latency.Measurement(collection, 500.0, [100.0, 120.0, 140.0], 1.5).row()
        for collection in bench.rerank_latency.COLLECTIONS
    ]
    args = {"candidates": 84, "repetitions": 3, "max_length": 256, "batch_size": 32, "device": "cpu"}
    result = {"model": "models/reranker", "load_s": 1.0, **args, "results": rows}
    bench.common.save_result("rerank-latency", result)


def test_every_kind_becomes_a_png_with_a_bar_per_measured_cell(bench: SimpleNamespace, tmp_path: Path) -> None:
    write_quality(bench)
    write_query_latency(bench)
    write_ingest(bench)
    write_peers(bench)
    write_rerank_latency(bench)

    said: list[str] = []
    written, problems = bench.plots.write_plots(tmp_path, said.append)

    assert problems == []
    assert sorted(path.name for path in written) == [
        "ingest.png",
        "latency.png",
        "peers.png",
        "quality.png",
        "rerank-latency.png",
    ]
    for path in written:
        assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        assert path.stat().st_size > 10_000

    figures, _ = bench.plots.render(tmp_path, said.append)

    # quality: scifact × 6 runs + jsquad × 7 runs, in both panels; jsquad's degraded hybrid+rerank is hatched.
    quality = figures["quality"].axes
    assert [axis.get_ylabel() for axis in quality] == ["nDCG@10", "MRR@10"]
    assert [bars(axis) for axis in quality] == [13, 13]
    legend = [text.get_text() for text in figures["quality"].legends[0].get_texts()]
    assert legend == [
        "keyword",
        "semantic",
        "hybrid",
        "hybrid + feedback",
        "hybrid at the KB's top_k",
        "hybrid+rerank",
        "keyword (char-bigram BM25)",
    ]
    assert [tick.get_text() for tick in quality[0].get_xticklabels()] == ["scifact (train)", "jsquad (dev)"]
    reranked = next(
        c for c in quality[0].containers if isinstance(c, BarContainer) and c.get_label() == "hybrid+rerank"
    )
    assert [patch.get_hatch() for patch in reranked.patches] == [None, "//"]
    keyword = next(c for c in quality[0].containers if isinstance(c, BarContainer) and c.get_label() == "keyword")
    rows = json.loads((tmp_path / "quality.json").read_text())["rows"]
    expected = [row["ndcg@10"] for row in rows if row["run"] == "keyword"]
    assert [patch.get_height() for patch in keyword.patches] == expected == [0.8155, 0.8155]

    # latency: 4 modes at 10k + 3 at 100k, latency and throughput.
    latency = figures["latency"].axes
    assert [bars(axis) for axis in latency] == [7, 7]
    assert [tick.get_text() for tick in latency[0].get_xticklabels()] == ["10,000 chunks", "100,000 chunks"]

    # ingest: pipeline × 2 KBs + raw encode × 1; 3 formats; stage shares: 4 stages × (2 KBs + 3 formats).
    # memory: one KB measured, a bar per service (api, retriever, worker).
    assert [bars(axis) for axis in figures["ingest"].axes] == [3, 3, 20, 3]

    # peers: nDCG@10, MRR@10 and latency: 4 systems; ingest: those 4 and ragkb's int8-mixed passages beside them.
    assert [bars(axis) for axis in figures["peers"].axes] == [4, 4, 4, 5]
    peer_legend = [text.get_text() for text in figures["peers"].legends[0].get_texts()]
    assert peer_legend[:2] == ["ragkb", "ragkb, int8-mixed passages"]

    # rerank latency: p50 and p95 per collection.
    assert [bars(axis) for axis in figures["rerank-latency"].axes] == [2 * len(bench.rerank_latency.COLLECTIONS)]


def test_kinds_without_a_file_are_skipped_and_said(bench: SimpleNamespace, tmp_path: Path) -> None:
    write_rerank_latency(bench)
    (tmp_path / "quality-broken.json").write_text('{"rows": [{"corpus": "scifact"}]}')

    said: list[str] = []
    written, problems = bench.plots.write_plots(tmp_path, said.append)

    assert [path.name for path in written] == ["rerank-latency.png"]
    assert sorted(path.name for path in tmp_path.glob("*.png")) == ["rerank-latency.png"]
    for png, pattern in (("latency.png", "query*.json"), ("ingest.png", "ingest*.json"), ("peers.png", "peers*.json")):
        assert f"{png}: skipped, no {pattern} in {tmp_path}" in said
    assert len(problems) == 1
    assert problems[0].startswith("quality.png: not drawn, quality-broken.json lacks what it needs (KeyError")


def test_other_benches_files_under_a_kinds_prefix_are_left_out(bench: SimpleNamespace, tmp_path: Path) -> None:
    # Written by bench/quality.py --compare, bench/query_encoder.py and bench/ingest_profile.py: not charts' input.
    write_quality(bench)
    write_query_latency(bench)
    write_ingest(bench)
    (tmp_path / "quality-compare-a-b.json").write_text('{"compared": ["a", "b"], "table": "| |"}')
    (tmp_path / "query-encoder.json").write_text('{"runs": [], "corpora": []}')
    (tmp_path / "ingest-profile-x.json").write_text('{"corpus": "jsquad", "documents": 400}')
    (tmp_path / "ingest-profile-only.json").write_text('{"corpus": "jsquad"}')

    said: list[str] = []
    written, problems = bench.plots.write_plots(tmp_path, said.append)

    assert problems == []
    assert {"quality.png", "latency.png", "ingest.png"} <= {path.name for path in written}
    (tmp_path / "ingest.png").unlink()
    for path in tmp_path.glob("ingest-*.json"):
        if not path.name.startswith("ingest-profile"):
            path.unlink()
    bench.plots.write_plots(tmp_path, said.append)
    assert f"ingest.png: skipped, no ingest result among ingest*.json in {tmp_path}" in said


def test_ragkbs_ingest_figures_read_a_runs_list_and_an_older_files_object(bench: SimpleNamespace) -> None:
    measured = {"passage_precision": "float32", "documents": 500, "documents_per_s": 40.0}
    runs = [measured, {**measured, "passage_precision": "int8-mixed"}]
    older = {"documents": 2304, "documents_per_s": 39.5, "file": "bench/results/ingest-bench-jsquad-2304.json"}
    assert bench.common.ragkb_ingest_runs({"ingest": runs}) == runs
    assert bench.common.ragkb_ingest_runs({"ingest": older}) == [
        older | {"passage_precision": "float32 (bench/ingest.py's file)"}
    ]
    assert bench.common.ragkb_ingest_runs({"ingest": None}) == []
