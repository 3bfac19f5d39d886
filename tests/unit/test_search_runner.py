"""Where the retriever runs a search (ragkb_retriever.search_runner): on the event loop only when it needs no
model and no other search is in flight; in a worker thread otherwise; errors reach the caller either way."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ragkb_analyzer import Analyzer, Bm25Encoder
from ragkb_core.contracts import KbSearch, SearchQuery, SearchResult
from ragkb_core.errors import NotFound
from ragkb_core.kb_settings import KbAnalyzer
from ragkb_core.settings import AnalyzerSettings
from ragkb_retriever.query_vectors import QueryVectorCache
from ragkb_retriever.search_runner import SearchRunner
from ragkb_retriever.searching import SearchService
from tests.unit.test_search_candidates import FixedVector, RecordingIndex, ScriptedReranker


class RecordingSearch(SearchService):
    """A SearchService that records the thread each search ran on; `needs_model` is what it says of every query."""

    def __init__(self, needs_model: bool, hold: threading.Event | None = None) -> None:
        self.needs_model = needs_model
        self.hold = hold
        self.threads: list[threading.Thread] = []

    def runs_without_models(self, query: SearchQuery) -> bool:
        return not self.needs_model

    def search(self, query: SearchQuery) -> SearchResult:
        self.threads.append(threading.current_thread())
        if query.query == "unknown":
            raise NotFound("no such KB")
        if self.hold is not None:
            self.hold.wait(5)
        return SearchResult(results=[], took_ms=0.1, mode="keyword")


def query(text: str = "paid leave") -> SearchQuery:
    return SearchQuery(query=text, knowledge_bases=[KbSearch(kb_id="a" * 32)], mode="keyword")


def one_search_alone(search: RecordingSearch) -> threading.Thread:
    """Runs one search through a SearchRunner; the event loop's thread."""

    async def run() -> threading.Thread:
        await SearchRunner(search).search(query())
        return threading.current_thread()

    return asyncio.run(run())


def test_a_search_alone_that_needs_no_model_runs_on_the_event_loop() -> None:
    search = RecordingSearch(needs_model=False)
    assert search.threads == [one_search_alone(search)]


def test_a_search_that_needs_a_model_runs_in_a_worker_thread() -> None:
    search = RecordingSearch(needs_model=True)
    loop_thread = one_search_alone(search)
    assert len(search.threads) == 1 and search.threads[0] is not loop_thread


def test_a_search_arriving_while_another_is_in_flight_runs_in_a_worker_thread() -> None:
    hold = threading.Event()
    # The first needs a model (a thread, held there); the second needs none but finds the first in flight.
    first_search = RecordingSearch(needs_model=True, hold=hold)

    async def run() -> tuple[threading.Thread, list[threading.Thread]]:
        runner = SearchRunner(first_search)
        first = asyncio.create_task(runner.search(query()))
        while not first_search.threads:
            await asyncio.sleep(0.01)
        first_search.needs_model = False
        second = asyncio.create_task(runner.search(query()))
        await asyncio.sleep(0.05)
        hold.set()
        await asyncio.gather(first, second)
        # Both done: the next one is alone again.
        await runner.search(query())
        return threading.current_thread(), first_search.threads

    loop_thread, threads = asyncio.run(run())
    assert threads[0] is not loop_thread and threads[1] is not loop_thread
    assert threads[2] is loop_thread


@pytest.mark.parametrize("needs_model", [False, True])
def test_a_failed_search_raises_to_the_caller_and_leaves_none_in_flight(needs_model: bool) -> None:
    search = RecordingSearch(needs_model=needs_model)

    async def run() -> list[threading.Thread]:
        runner = SearchRunner(search)
        with pytest.raises(NotFound):
            await runner.search(query("unknown"))
        search.needs_model = False
        await runner.search(query())
        return [threading.current_thread()]

    [loop_thread] = asyncio.run(run())
    assert search.threads[-1] is loop_thread


def test_the_search_service_says_which_searches_need_no_model() -> None:
    index = RecordingIndex({"a" * 32: ["p0", "p1"]})
    encoder = Bm25Encoder(Analyzer(KbAnalyzer()), AnalyzerSettings())
    with_reranker = SearchService(index, lambda _: FixedVector(), lambda _: encoder, ScriptedReranker({}))  # type: ignore[arg-type]
    plain = SearchService(index, lambda _: FixedVector(), lambda _: encoder, NoReranker(), QueryVectorCache(16))  # type: ignore[arg-type]
    keyword, hybrid = query(), query().model_copy(update={"mode": "hybrid"})
    assert plain.runs_without_models(keyword)
    assert not plain.runs_without_models(hybrid)  # the question must be embedded
    plain.search(hybrid)
    assert plain.runs_without_models(hybrid)  # now its vector is cached
    assert not with_reranker.runs_without_models(keyword)  # the reranker is a model


class NoReranker(ScriptedReranker):
    def __init__(self) -> None:
        super().__init__({})

    def is_available(self, model: str | None) -> bool:
        return False
