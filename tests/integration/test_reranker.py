"""The reranking component on the real sentence-transformers CrossEncoder path, with a tiny cross-encoder built
for the session (no pretrained one ships offline). Its weights are random, so these tests check the mechanics —
the order is the model's, scores are its logits mapped to 0–1, the budget holds, every failure degrades with a
reason — never relevance."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from sentence_transformers import CrossEncoder

from ragkb_retriever.reranking import RerankerPool, RerankerStats
from ragkb_retriever.settings import RerankerSettings
from tests.support.tiny_cross_encoder import build_tiny_cross_encoder

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
QUERY = "how many days of paid leave do patients get"
GENEROUS_MS = 30_000


@pytest.fixture(scope="module")
def passages() -> list[str]:
    with (DATA / "scifact" / "corpus.jsonl").open(encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line, _ in zip(lines, range(24), strict=False)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder")))


@pytest.fixture(scope="module")
def pool(tiny: str) -> RerankerPool:
    pool = RerankerPool(RerankerSettings(model=tiny, max_length=128, batch_size=8))
    pool.warm_up()
    return pool


def raw_logits(folder: str, pairs: list[tuple[str, str]], max_length: int = 128) -> list[float]:
    model = CrossEncoder(folder, max_length=max_length, activation_fn=torch.nn.Identity())
    logits: list[float] = model.predict(pairs, show_progress_bar=False).tolist()
    return logits


def stats(pool: RerankerPool, model: str | None = None) -> RerankerStats:
    found = pool.stats(model)
    assert found is not None
    return found


def wait_for(condition: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def test_scores_are_the_models_logits_through_a_sigmoid_and_order_follows_them(
    pool: RerankerPool, tiny: str, passages: list[str]
) -> None:
    outcome = pool.rerank(None, QUERY, passages, GENEROUS_MS)
    logits = raw_logits(tiny, [(QUERY, passage) for passage in passages])

    assert outcome.degraded_reason is None and outcome.model == tiny
    assert outcome.scores is not None and len(outcome.scores) == len(passages)
    assert all(0 <= score <= 1 for score in outcome.scores)
    assert max(logits) - min(logits) > 0.5  # spread enough that the order is the model's, not float noise
    assert outcome.scores == pytest.approx([1 / (1 + math.exp(-logit)) for logit in logits], abs=1e-5)
    scores = outcome.scores
    assert sorted(range(len(passages)), key=lambda i: -scores[i]) == sorted(
        range(len(passages)), key=lambda i: -logits[i]
    )


def test_a_two_label_model_scores_the_probability_of_its_last_label(tmp_path: Path, passages: list[str]) -> None:
    folder = str(build_tiny_cross_encoder(tmp_path / "two-labels", num_labels=2))
    outcome = RerankerPool(RerankerSettings(model=folder, max_length=128)).rerank(None, QUERY, passages, GENEROUS_MS)
    logits = torch.tensor(raw_logits(folder, [(QUERY, passage) for passage in passages]))
    assert outcome.scores == pytest.approx(torch.softmax(logits, dim=-1)[:, 1].tolist(), abs=1e-5)


def test_batch_size_does_not_change_the_scores(tiny: str, pool: RerankerPool, passages: list[str]) -> None:
    one_by_one = RerankerPool(RerankerSettings(model=tiny, max_length=128, batch_size=1))
    expected = pool.rerank(None, QUERY, passages, GENEROUS_MS).scores
    assert one_by_one.rerank(None, QUERY, passages, GENEROUS_MS).scores == pytest.approx(expected, abs=1e-5)


def test_a_passage_longer_than_max_length_is_scored_on_its_beginning(pool: RerankerPool) -> None:
    beginning = "the study of cells and the risk of disease " * 40
    outcome = pool.rerank(None, QUERY, [beginning, beginning + "vitamin protein " * 5000], GENEROUS_MS)
    assert outcome.degraded_reason is None and outcome.scores is not None
    assert outcome.scores[0] == pytest.approx(outcome.scores[1], abs=1e-6)


def test_no_passages_is_no_work_and_no_degradation(pool: RerankerPool) -> None:
    outcome = pool.rerank(None, QUERY, [], 0)
    assert outcome.scores == [] and outcome.degraded_reason is None


def test_a_zero_budget_keeps_the_fused_order(pool: RerankerPool, passages: list[str]) -> None:
    before = pool.stats(None)
    outcome = pool.rerank(None, QUERY, passages, 0)
    assert outcome.scores is None and outcome.degraded
    assert outcome.degraded_reason == "the reranking budget is 0 ms"
    assert pool.stats(None) == before


def test_a_batch_estimated_over_the_budget_is_not_run(pool: RerankerPool, passages: list[str]) -> None:
    pool.rerank(None, QUERY, passages, GENEROUS_MS)  # teaches the estimate
    before = stats(pool)
    assert before.ms_per_pair is not None

    outcome = pool.rerank(None, QUERY, passages * 4, 1)

    assert outcome.scores is None
    assert outcome.degraded_reason is not None
    assert outcome.degraded_reason.startswith(f"reranking {len(passages) * 4} passages would take ~")
    assert outcome.degraded_reason.endswith("over the budget of 1 ms")
    assert pool.stats(None) == before  # the model was not called
    assert outcome.took_ms < 50


def test_a_run_past_the_budget_returns_at_the_deadline_and_still_teaches_the_estimate(
    tiny: str, passages: list[str]
) -> None:
    pool = RerankerPool(RerankerSettings(model=tiny, max_length=128))
    pool.warm_up()  # loaded, but no estimate yet: the deadline is the only guard

    # A budget long enough for the job to start even on a loaded machine (a job still queued at the deadline
    # is cancelled and teaches nothing), far too short for the work.
    outcome = pool.rerank(None, QUERY, passages * 60, 200)

    assert outcome.scores is None and outcome.degraded_reason == "the reranker exceeded the budget of 200 ms"
    assert outcome.took_ms < 2000
    wait_for(lambda: stats(pool).predictions == 1)
    assert stats(pool).ms_per_pair is not None


def test_a_model_loaded_on_first_use_may_degrade_while_loading(tiny: str, passages: list[str]) -> None:
    pool = RerankerPool(RerankerSettings(model=None, allowed_models=[tiny], max_length=128))
    assert pool.is_available(tiny) and not pool.is_available(None)

    first = pool.rerank(tiny, QUERY, passages, 1)
    assert first.degraded_reason == f"reranker {tiny!r} is still loading (first use)"

    wait_for(lambda: stats(pool, tiny).loaded)
    assert pool.rerank(tiny, QUERY, passages, GENEROUS_MS).degraded_reason is None
    assert stats(pool, tiny).load_attempts == 1


def test_a_model_not_on_the_list_is_refused_without_loading(pool: RerankerPool, tmp_path: Path) -> None:
    other = str(build_tiny_cross_encoder(tmp_path / "other"))
    assert not pool.is_available(other)
    outcome = pool.rerank(other, QUERY, ["a passage"], GENEROUS_MS)
    assert outcome.scores is None and outcome.model == other
    assert outcome.degraded_reason == (
        f"reranker {other!r} is not allowed on this server (RAGKB_RERANKER__MODEL / RAGKB_RERANKER__ALLOWED_MODELS)"
    )
    assert pool.stats(other) is None


def test_no_reranker_configured_degrades() -> None:
    outcome = RerankerPool(RerankerSettings(model=None)).rerank(None, QUERY, ["a passage"], GENEROUS_MS)
    assert outcome.scores is None and outcome.model is None
    assert outcome.degraded_reason == "no reranker is configured on this server (RAGKB_RERANKER__MODEL)"


def test_a_missing_folder_degrades_and_is_not_reloaded_on_every_request(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-model")
    pool = RerankerPool(RerankerSettings(model=missing))
    pool.warm_up()  # logs, does not raise

    for _ in range(2):
        outcome = pool.rerank(None, QUERY, ["a passage"], GENEROUS_MS)
        assert outcome.scores is None
        assert outcome.degraded_reason == (
            f"reranker {missing!r} could not be loaded: FileNotFoundError: no model folder at {missing}"
        )
    assert pool.stats(None) == pool.stats(missing)
    assert stats(pool).load_attempts == 1


def test_a_folder_with_a_broken_config_degrades(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    outcome = RerankerPool(RerankerSettings(model=str(broken))).rerank(None, QUERY, ["a passage"], GENEROUS_MS)
    assert outcome.scores is None and outcome.degraded_reason is not None
    assert outcome.degraded_reason.startswith(f"reranker {str(broken)!r} could not be loaded: OSError: ")


def test_a_model_failing_on_its_input_degrades_with_the_error(tmp_path: Path, passages: list[str]) -> None:
    # Loads, but its position table (16) is shorter than the pairs it is given (max_length 128).
    short = str(build_tiny_cross_encoder(tmp_path / "short", max_positions=16))
    pool = RerankerPool(RerankerSettings(model=short, max_length=128))
    outcome = pool.rerank(None, QUERY, passages, GENEROUS_MS)
    assert outcome.scores is None and outcome.degraded_reason is not None
    assert outcome.degraded_reason.startswith("the reranker failed: RuntimeError: ")
    assert pool.rerank(None, "q", ["a"], GENEROUS_MS).degraded_reason is None  # short pairs still work


def test_concurrent_requests_get_the_same_scores(pool: RerankerPool, passages: list[str]) -> None:
    expected = pool.rerank(None, QUERY, passages, GENEROUS_MS).scores
    with ThreadPoolExecutor(max_workers=4) as threads:
        outcomes = list(threads.map(lambda _: pool.rerank(None, QUERY, passages, GENEROUS_MS), range(8)))
    assert all(outcome.scores == pytest.approx(expected, abs=1e-6) for outcome in outcomes)
