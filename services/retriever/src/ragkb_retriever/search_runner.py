"""Where a search runs: on the event loop, or in a worker thread.

A search that is the index's work alone (SearchService.runs_without_models: a keyword search, or one whose
question's vectors are cached, with no reranker and no external KB) and finds no other search in flight runs
on the event loop. Every other search runs in a worker thread, as all did before. Measured on the 2-core machine
(bench/results/latency-ab-2026-12-07b-lean-take.md, `retriever_hop_ms`): handing a search to a thread and its
answer back cost ~0.3 ms of the ~2 ms the api waits for the retriever beyond its `took_ms`, and a keyword search
at 10k chunks takes ~2–3 ms.

Why only those: a search on the loop holds the loop for its whole time, so nothing that waits on a model (an
embedding of ~10 ms, a rerank of seconds) or on another server runs there, and a search that arrives while
another is in flight goes to a thread, where the two proceed side by side as before (ONNX Runtime releases the
interpreter while it embeds). At most one search's index work (a few ms) delays a request that
arrives meanwhile.
"""

from __future__ import annotations

from anyio.to_thread import run_sync

from ragkb_core.contracts import SearchQuery, SearchResult
from ragkb_retriever.searching import SearchService


class SearchRunner:
    def __init__(self, search: SearchService) -> None:
        self._search = search
        # Searches in flight; read and changed on the event loop's thread only.
        self._in_flight = 0

    async def search(self, query: SearchQuery) -> SearchResult:
        on_the_loop = self._in_flight == 0 and self._search.runs_without_models(query)
        self._in_flight += 1
        try:
            if on_the_loop:
                return self._search.search(query)
            return await run_sync(self._search.search, query)
        finally:
            self._in_flight -= 1
