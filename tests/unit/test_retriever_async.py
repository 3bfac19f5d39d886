"""The api's async call to the retriever (ragkb_api.retriever_async) against real HTTP servers the test starts on
a local port, each speaking HTTP/1.1 the way a server may: kept-alive answers with a Content-Length, chunked
answers, connections closed between or during exchanges, problem details, no answer at all."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from pydantic import SecretStr

from ragkb_api.retriever_async import AsyncRetrieverSearch
from ragkb_core import request_context
from ragkb_core.errors import Conflict, ExternalUnavailable, InvalidInput, NotFound, Unavailable
from ragkb_core.settings import RetrieverClientSettings

ANSWER = json.dumps({"results": [{"text": "ja: 日本語", "score": 0.5}], "took_ms": 1.25}).encode()
Reply = Callable[["Exchange"], bytes | None]


@dataclass
class Exchange:
    """What one request carried, as the server read it."""

    request_line: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    port: int
    exchanges: list[Exchange] = field(default_factory=list)
    connections: int = 0


def answer(status: int, body: bytes, *extra: str) -> bytes:
    head = [f"HTTP/1.1 {status} X", f"content-length: {len(body)}", "content-type: application/json", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@asynccontextmanager
async def http_server(reply: Reply) -> AsyncIterator[Server]:
    """Reads requests (head + Content-Length body) on each connection; `reply` gives the bytes to send, or None
    to close the connection without answering."""
    server = Server(port=0)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
                exchange = Exchange(head[0], headers, await reader.readexactly(int(headers["content-length"])))
                server.exchanges.append(exchange)
                sent = reply(exchange)
                if sent is None:
                    break
                writer.write(sent)
                await writer.drain()
                if b"connection: close" in sent.lower().split(b"\r\n\r\n")[0]:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:  # also when the test's loop ends and cancels this
            writer.close()

    listening = await asyncio.start_server(serve, "127.0.0.1", 0)
    server.port = listening.sockets[0].getsockname()[1]
    async with listening:
        yield server


def client(port: int, timeout_s: float = 5.0, token: str | None = "service-secret") -> AsyncRetrieverSearch:
    settings = RetrieverClientSettings(url=f"http://127.0.0.1:{port}", timeout_s=timeout_s)
    return AsyncRetrieverSearch(settings, SecretStr(token) if token else None)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def test_the_answer_comes_back_byte_for_byte_over_one_kept_alive_connection() -> None:
    async def test() -> None:
        async with http_server(lambda _: answer(200, ANSWER)) as server:
            retriever = client(server.port)
            token = request_context.request_id.set("req-42")
            try:
                answers = [await retriever.search_json(b'{"query":"q"}') for _ in range(3)]
            finally:
                request_context.request_id.reset(token)
            await retriever.aclose()
        assert answers == [ANSWER] * 3
        assert server.connections == 1
        first = server.exchanges[0]
        assert first.request_line == "POST /internal/v1/search HTTP/1.1"
        assert first.body == b'{"query":"q"}'
        assert first.headers["x-ragkb-service-token"] == "service-secret"
        assert first.headers["x-request-id"] == "req-42"
        assert first.headers["content-type"] == "application/json"

    run(test)


def test_a_chunked_answer_is_read_whole() -> None:
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"".join(
        f"{len(part):x}\r\n".encode() + part + b"\r\n" for part in (ANSWER[:10], ANSWER[10:])
    )

    async def test() -> None:
        async with http_server(lambda _: chunked + b"0\r\n\r\n") as server:
            retriever = client(server.port)
            assert await retriever.search_json(b"{}") == ANSWER
            assert await retriever.search_json(b"{}") == ANSWER
            await retriever.aclose()
        assert server.connections == 1

    run(test)


def test_a_connection_the_server_closed_while_idle_costs_the_caller_nothing() -> None:
    # The server answers once per connection and then drops it, as a retriever closing an idle connection (or
    # restarted between two searches) does: the next search goes out again on a new connection.
    async def test() -> None:
        async with http_server(lambda _: answer(200, ANSWER, "connection: keep-alive")) as server:
            retriever = client(server.port)
            assert await retriever.search_json(b"{}") == ANSWER
            # The server end of the kept-alive connection goes away without a word.
            for one in list(retriever._idle):
                one.writer.transport.abort()
            assert await retriever.search_json(b"{}") == ANSWER
            await retriever.aclose()

    run(test)


def test_connection_close_is_honoured() -> None:
    async def test() -> None:
        async with http_server(lambda _: answer(200, ANSWER, "connection: close")) as server:
            retriever = client(server.port)
            assert [await retriever.search_json(b"{}") for _ in range(2)] == [ANSWER, ANSWER]
            await retriever.aclose()
        assert server.connections == 2

    run(test)


def test_a_retriever_that_is_not_listening_is_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there

    async def test() -> None:
        with pytest.raises(Unavailable) as raised:
            await client(port).search_json(b"{}")
        assert raised.value.status == 503

    run(test)


def test_a_retriever_that_goes_away_mid_exchange_is_unavailable_and_the_next_search_works() -> None:
    replies = iter([answer(200, ANSWER), None, None, answer(200, ANSWER)])

    async def test() -> None:
        async with http_server(lambda _: next(replies)) as server:
            retriever = client(server.port)
            assert await retriever.search_json(b"{}") == ANSWER
            # Dropped without an answer on the kept-alive connection, and again on the fresh one: 503.
            with pytest.raises(Unavailable, match="retriever unreachable"):
                await retriever.search_json(b"{}")
            assert await retriever.search_json(b"{}") == ANSWER
            await retriever.aclose()

    run(test)


def test_a_retriever_that_does_not_answer_in_time_is_unavailable() -> None:
    async def test() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.read()  # reads, never answers
            finally:
                writer.close()

        listening = await asyncio.start_server(silent, "127.0.0.1", 0)
        async with listening:
            retriever = client(listening.sockets[0].getsockname()[1], timeout_s=0.2)
            with pytest.raises(Unavailable, match="TimeoutError"):
                await retriever.search_json(b"{}")

    run(test)


@pytest.mark.parametrize(
    ("status", "error"),
    [(404, NotFound), (409, Conflict), (422, InvalidInput), (502, ExternalUnavailable), (500, Unavailable)],
)
def test_the_retrievers_problem_details_map_onto_the_domain_errors(status: int, error: type[Exception]) -> None:
    problem = json.dumps({"status": status, "detail": "what the retriever said"}).encode()

    async def test() -> None:
        async with http_server(lambda _: answer(status, problem)) as server:
            retriever = client(server.port)
            with pytest.raises(error, match="what the retriever said"):
                await retriever.search_json(b"{}")
            # The connection stays usable after an error answer.
            with pytest.raises(error):
                await retriever.search_json(b"{}")
            await retriever.aclose()
        assert server.connections == 1

    run(test)


def test_a_sync_caller_in_a_worker_thread_has_the_call_made_on_the_loop_with_its_request_id() -> None:
    # The sync handlers (tools, /v1/context, MCP, Dify) run in the loop's executor threads: their search is
    # handed to the loop's client, and the request id of the thread's context still reaches the retriever.
    def search_from_thread(retriever: AsyncRetrieverSearch) -> bytes | None:
        token = request_context.request_id.set("from-a-thread")
        try:
            return retriever.search_json_from_thread(b'{"query":"q"}')
        finally:
            request_context.request_id.reset(token)

    async def test() -> None:
        async with http_server(lambda _: answer(200, ANSWER)) as server:
            retriever = client(server.port)
            assert search_from_thread(retriever) is None  # not bound to a loop yet: the caller uses httpx
            retriever.bind_to_running_loop()
            assert search_from_thread(retriever) is None  # on the loop's own thread: it must not wait on itself
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, search_from_thread, retriever) == ANSWER
            await retriever.aclose()
        assert [exchange.headers["x-request-id"] for exchange in server.exchanges] == ["from-a-thread"]

    run(test)


def test_a_sync_caller_gets_the_same_errors_as_an_async_one() -> None:
    async def test() -> None:
        async with http_server(lambda _: answer(409, b'{"detail": "being deleted"}')) as server:
            retriever = client(server.port)
            retriever.bind_to_running_loop()
            with pytest.raises(Conflict, match="being deleted"):
                await asyncio.get_running_loop().run_in_executor(
                    None, retriever.search_json_from_thread, b'{"query":"q"}'
                )
            await retriever.aclose()

    run(test)
