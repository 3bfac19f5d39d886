"""The HTTP reranker (ragkb_retriever.http_reranking) against a real rerank service process of the common
`/rerank` shape serving ragkb's own cross-encoder code (tests/support/rerank_server.py) with a tiny model built
for the session: the same scores as the local reranker, both answer shapes, and every failure degraded with a
reason, as a local model's are."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragkb_retriever.reranking import RerankerPool
from ragkb_retriever.settings import HttpRerankerSpec, RerankerSettings
from tests.support.redis_server import free_port
from tests.support.rerank_server import MAX_LENGTH, running_rerank_server
from tests.support.tiny_cross_encoder import build_tiny_cross_encoder

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
QUERY = "how many days of paid leave do patients get"
KEY = "rk-test-rerank-key-0123456789"
GENEROUS_MS = 30_000


@pytest.fixture(scope="module")
def passages() -> list[str]:
    with (DATA / "scifact" / "corpus.jsonl").open(encoding="utf-8") as lines:
        return [json.loads(line)["text"][:400] for line, _ in zip(lines, range(16), strict=False)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))


@pytest.fixture(scope="module")
def service(tiny: Path) -> Iterator[str]:
    with running_rerank_server(tiny, api_key=KEY) as url:
        yield url


def pool_of(**specs: HttpRerankerSpec) -> RerankerPool:
    return RerankerPool(RerankerSettings(model=None, http_models=specs))


def spec(url: str, **fields: object) -> HttpRerankerSpec:
    return HttpRerankerSpec.model_validate({"url": url, "api_key": KEY, "model": "tiny", **fields})


def test_the_service_scores_as_the_local_reranker_does(service: str, tiny: Path, passages: list[str]) -> None:
    local = RerankerPool(RerankerSettings(model=str(tiny), max_length=MAX_LENGTH)).rerank(
        None, QUERY, passages, GENEROUS_MS
    )
    pool = pool_of(cohere=spec(service), tei=spec(service, documents_field="texts"))
    assert pool.is_available("cohere") and pool.is_available("tei") and not pool.is_available("other")
    for name in ("cohere", "tei"):  # Cohere's {results: [{index, relevance_score}]} and TEI's [{index, score}]
        outcome = pool.rerank(name, QUERY, passages, GENEROUS_MS)
        assert outcome.degraded_reason is None and outcome.model == name
        assert local.scores is not None and outcome.scores == pytest.approx(local.scores, abs=1e-5)
    stats = pool.stats("cohere")
    assert stats is not None and stats.predictions == 1


def test_a_refused_key_degrades_with_the_services_answer(service: str, passages: list[str]) -> None:
    outcome = pool_of(wrong=spec(service, api_key="not-the-key")).rerank("wrong", QUERY, passages, GENEROUS_MS)
    assert outcome.scores is None and outcome.degraded_reason is not None
    assert outcome.degraded_reason.startswith("the reranker 'wrong' answered HTTP 401")


def test_a_service_that_is_down_degrades(passages: list[str]) -> None:
    nobody = f"http://127.0.0.1:{free_port()}/rerank"
    outcome = pool_of(gone=spec(nobody)).rerank("gone", QUERY, passages[:2], GENEROUS_MS)
    assert outcome.scores is None and outcome.degraded_reason is not None
    assert outcome.degraded_reason.startswith("the reranker 'gone' could not be reached: ConnectError")


def test_the_search_budget_is_the_calls_timeout(tiny: Path, passages: list[str]) -> None:
    with running_rerank_server(tiny, delay_ms=1500) as url:
        pool = pool_of(slow=spec(url, api_key=None, timeout_s=10))
        outcome = pool.rerank("slow", QUERY, passages, 300)
        assert outcome.scores is None and outcome.degraded_reason == "the reranker 'slow' exceeded the budget of 300 ms"
        assert outcome.took_ms < 1400
        assert pool.rerank("slow", QUERY, passages[:1], GENEROUS_MS).degraded_reason is None


def test_raw_scores_need_logits_declared(service: str, passages: list[str]) -> None:
    """The tiny model's probabilities read as logits are still in 0–1 once mapped; declared or not, a score
    is never taken outside 0–1."""
    outcome = pool_of(raw=spec(service, logits=True)).rerank("raw", QUERY, passages, GENEROUS_MS)
    assert outcome.scores is not None and all(0.5 <= score <= 1 for score in outcome.scores)
