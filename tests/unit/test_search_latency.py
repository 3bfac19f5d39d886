"""The pieces of the search path that make it fast without changing what it answers: the query vector cache,
the retriever's JSON passed on by the api with the query added, Server-Timing, and the retriever's query
embedding settings."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from ragkb_api.search.service import with_query
from ragkb_api.timing import StageTimings, server_timing
from ragkb_core.contracts import SearchHit, SearchResult
from ragkb_core.errors import Unavailable
from ragkb_core.settings import EmbeddingSettings, available_cores
from ragkb_retriever.query_vectors import QueryVectorCache
from ragkb_retriever.settings import (
    QUERY_THREADS_CAP,
    RetrieverServerSettings,
    RetrieverSettings,
    query_embedding_settings,
)


def test_a_cached_query_vector_is_the_computed_one_and_is_not_computed_again() -> None:
    cache = QueryVectorCache(capacity=2)
    calls: list[str] = []

    def embed(text: str) -> list[float]:
        calls.append(text)
        return [0.1, 1 / 3, -2.5e-8]  # float32-representable or not: what comes back equals this float32

    first = cache.get_or_embed(None, "q", lambda: embed("q"))
    again = cache.get_or_embed(None, "q", lambda: embed("q"))
    assert calls == ["q"]
    assert again == [float(v) for v in np.asarray(first, dtype=np.float32)]
    assert (cache.hits, cache.misses) == (1, 1)


def test_query_vectors_are_kept_per_model_and_the_least_recently_used_goes_first() -> None:
    cache = QueryVectorCache(capacity=2)
    cache.get_or_embed(None, "a", lambda: [1.0])
    cache.get_or_embed("other-model", "a", lambda: [2.0])
    assert cache.get_or_embed(None, "a", lambda: [9.0]) == [1.0]  # "a" of the default model used again
    cache.get_or_embed(None, "b", lambda: [3.0])  # full: the other model's "a" goes
    assert len(cache) == 2
    assert cache.get_or_embed("other-model", "a", lambda: [4.0]) == [4.0]
    assert cache.get_or_embed(None, "a", lambda: [9.0]) == [9.0]  # pushed out by the line above


def test_a_cache_of_no_capacity_keeps_nothing() -> None:
    cache = QueryVectorCache(capacity=0)
    assert cache.get_or_embed(None, "a", lambda: [1.0]) == [1.0]
    assert cache.get_or_embed(None, "a", lambda: [2.0]) == [2.0]
    assert len(cache) == 0


def test_the_cache_is_safe_under_threads() -> None:
    cache = QueryVectorCache(capacity=8)
    errors: list[BaseException] = []

    def hammer(seed: int) -> None:
        try:
            for i in range(300):
                text = f"q{(seed + i) % 20}"
                assert cache.get_or_embed(None, text, lambda t=text: [float(len(t))]) == [float(len(text))]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(cache) == 8


def _result() -> SearchResult:
    hit = SearchHit(
        chunk_id="c",
        text='有給休暇は "20" 日',
        score=0.5,
        knowledge_base_id="k",
        document_id="d",
        source_id="s",
        title="t",
        version=1,
        ordinal=0,
    )
    return SearchResult(results=[hit], took_ms=1.5, mode="hybrid", timings_ms={"embed": 1.0})


@pytest.mark.parametrize("query", ["有給休暇は何日?", 'quote " and \\ backslash', "\u2028 line separator"])
def test_the_api_answer_is_the_retrievers_json_with_the_query_added(query: str) -> None:
    retriever_json = _result().model_dump_json().encode()
    answer = json.loads(with_query(retriever_json, query))
    assert answer == {"query": query, **json.loads(retriever_json)}


def test_an_empty_object_from_the_retriever_stays_valid_json() -> None:
    assert json.loads(with_query(b"{}", "q")) == {"query": "q"}


def test_an_answer_that_is_not_an_object_is_the_retrievers_failure() -> None:
    with pytest.raises(Unavailable):
        with_query(b"[1]", "q")


def test_server_timing_names_every_stage_and_the_total() -> None:
    timings = StageTimings()
    with timings.stage("kbs"):
        pass
    with timings.stage("retriever"):
        pass
    header = server_timing(timings.all_ms(auth=0.25))
    names = [metric.split(";")[0] for metric in header.split(", ")]
    assert names == ["auth", "kbs", "retriever", "total"]
    assert all(";dur=" in metric for metric in header.split(", "))


def test_the_retriever_embeds_queries_on_its_cores_at_most_four_in_the_faster_precision_unless_told() -> None:
    assert RetrieverServerSettings().query_precision == "auto"  # resolved on the CPU: tests/integration
    default = query_embedding_settings(RetrieverSettings(retriever=RetrieverServerSettings(query_precision="float32")))
    assert default.threads == min(available_cores(), QUERY_THREADS_CAP)
    assert default.backend == "onnx"
    one = query_embedding_settings(RetrieverSettings(retriever=RetrieverServerSettings(embed_threads=1)))
    assert one.threads == 1  # a set value is kept
    int8 = query_embedding_settings(
        RetrieverSettings(retriever=RetrieverServerSettings(query_int8=True, embed_threads=2))
    )
    assert (int8.backend, int8.threads) == ("onnx-int8-mixed", 2)
    on_torch = query_embedding_settings(
        RetrieverSettings(
            retriever=RetrieverServerSettings(query_int8=True), embedding=EmbeddingSettings(backend="torch")
        )
    )
    assert on_torch.backend == "torch"  # int8 is a graph of the ONNX runtime only
    block = query_embedding_settings(
        RetrieverSettings(retriever=RetrieverServerSettings(query_precision="int8-block", query_int8=True))
    )
    assert block.backend == "onnx-int8-block"  # a precision named wins over the older switch
