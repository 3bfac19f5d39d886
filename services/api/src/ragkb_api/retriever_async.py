"""The retriever's search call for the api's async search handler: HTTP/1.1 over a pool of kept-alive
asyncio connections, on the caller's event loop, the answer's bytes handed back undecoded.

Why not httpx.AsyncClient: one search's call through it cost ~630 µs of CPU in the api (sync httpx in a worker
thread ~440 µs), against ~35 µs for this client, same server, same bytes (measured in process, 2026-12-05:
bench/results/api-async-2026-12-05.md). The retriever is our own server on a trusted network answering one
JSON body with a Content-Length, so the HTTP this needs is small; chunked answers and `Connection: close` are
read correctly all the same. Everything else the sync RetrieverClient does (index writes, the worker's calls)
stays on httpx.

What the sync client guarantees holds here too: the service token and the request id travel with the call
(and the trace context when tracing is on, inside a client span); an unreachable retriever, a timeout or a
dropped connection is Unavailable (503 with Retry-After to the caller); the retriever's problem details map
onto the same domain errors (retriever_client.error_from_status)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import ssl
import time
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import SecretStr

from ragkb_core.errors import RagkbError, Unavailable
from ragkb_core.request_context import REQUEST_ID_HEADER, request_id
from ragkb_core.retriever_client import (
    CLIENT_KEEP_ALIVE_S,
    INTERNAL_PREFIX,
    SERVICE_TOKEN_HEADER,
    error_from_status,
)
from ragkb_core.settings import RetrieverClientSettings

# Idle connections kept for the next calls; more may be open at once while that many calls are in flight.
MAX_IDLE_CONNECTIONS = 32
# Calls in flight at once (httpx's default pool limit, which the api had): more wait for a free one, within the
# call's timeout.
MAX_CONNECTIONS = 100
# A response head longer than this is not the retriever's.
MAX_HEAD_BYTES = 64 * 1024
_tracer = trace.get_tracer("ragkb.retriever_client")


class RetrieverGone(Exception):
    """The connection ended before a whole answer came: the caller sees Unavailable."""


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    # A connection works on the loop that opened it only (an app served by one loop after another: tests).
    loop: asyncio.AbstractEventLoop
    idle_since: float = 0.0

    def usable(self, now: float) -> bool:
        """Still open on both sides, of this loop, and not idle long enough for the retriever to be closing it."""
        return (
            self.loop is asyncio.get_running_loop()
            and not self.reader.at_eof()
            and not self.writer.is_closing()
            and now - self.idle_since < CLIENT_KEEP_ALIVE_S
        )

    def close(self) -> None:
        if not self.loop.is_closed():
            self.writer.close()


@dataclass(frozen=True)
class _Answer:
    status: int
    body: bytes
    keep_alive: bool


class AsyncRetrieverSearch:
    """`await search_json(query_json)`: the retriever's SearchResult JSON for a SearchQuery's JSON."""

    def __init__(self, settings: RetrieverClientSettings, service_token: SecretStr | None) -> None:
        url = urlsplit(settings.url)
        self._host = url.hostname or "127.0.0.1"
        self._tls = ssl.create_default_context() if url.scheme == "https" else None
        self._port = url.port or (443 if self._tls else 80)
        self._path_prefix = url.path.rstrip("/") + INTERNAL_PREFIX
        self._timeout_s = settings.timeout_s
        token = f"{SERVICE_TOKEN_HEADER}: {service_token.get_secret_value()}\r\n" if service_token else ""
        # Every call's fixed header lines, encoded once.
        self._fixed_headers = f"Host: {url.netloc}\r\nContent-Type: application/json\r\n{token}".encode("latin-1")
        self._idle: deque[_Connection] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)

    async def search_json(self, query_json: bytes) -> bytes:
        """The retriever's answer to POST /internal/v1/search, as its bytes."""
        return await self.post_json("/search", query_json)

    async def post_json(self, path: str, body: bytes) -> bytes:
        with _tracer.start_as_current_span(f"POST {INTERNAL_PREFIX}{path}", kind=SpanKind.CLIENT) as span:
            try:
                # asyncio.timeout, not wait_for: no task of its own per call.
                async with asyncio.timeout(self._timeout_s), self._slots:
                    answer = await self._exchange(self._request(path, body))
            except (
                OSError,
                ValueError,
                RetrieverGone,
                TimeoutError,
                asyncio.IncompleteReadError,
                asyncio.LimitOverrunError,
            ) as exc:
                span.set_status(Status(StatusCode.ERROR))
                raise Unavailable(f"retriever unreachable: {type(exc).__name__}") from exc
            span.set_attribute("http.response.status_code", answer.status)
        if answer.status >= 400:
            error: RagkbError = error_from_status(answer.status, answer.body)
            raise error
        return answer.body

    def bind_to_running_loop(self) -> None:
        """At the app's start-up: the loop that sync handlers' threads hand their calls to (search_json_from_thread)."""
        self._loop = asyncio.get_running_loop()

    def search_json_from_thread(self, query_json: bytes) -> bytes | None:
        """`search_json` for a sync caller in a worker thread: made on the app's loop, this thread waiting, with
        the caller's context (request id, trace). None where no loop serves this client (never bound, closed)
        or when called on a loop's own thread, which must not block on itself: the caller uses the sync client."""
        loop = self._loop
        if loop is None or loop.is_closed() or _on_an_event_loop():
            return None
        answer: concurrent.futures.Future[bytes] = concurrent.futures.Future()

        def start() -> None:  # on the loop, inside the caller's context: the task copies it
            task = asyncio.ensure_future(self.search_json(query_json))
            task.add_done_callback(lambda done: _settle(answer, done))

        loop.call_soon_threadsafe(start, context=contextvars.copy_context())
        return answer.result()

    async def aclose(self) -> None:
        while self._idle:
            self._idle.popleft().close()

    def _request(self, path: str, body: bytes) -> bytes:
        headers: dict[str, str] = {}
        current = request_id.get()
        if current:  # accepted_request_id let only [A-Za-z0-9._:@/+=-] through: safe in a header line
            headers[REQUEST_ID_HEADER] = current
        propagate.inject(headers)  # traceparent of the client span, when tracing is on
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items()).encode("latin-1")
        head = f"POST {self._path_prefix}{path} HTTP/1.1\r\nContent-Length: {len(body)}\r\n".encode("latin-1")
        return head + self._fixed_headers + extra + b"\r\n" + body

    async def _exchange(self, request: bytes) -> _Answer:
        """Send on an idle connection, or a new one. A kept-alive connection the retriever closed meanwhile
        fails before any answer byte: the search (a read) is sent once more, on a new connection."""
        connection = self._idle_connection()
        if connection is not None:
            try:
                return await self._send_on(connection, request)
            except (OSError, RetrieverGone, asyncio.IncompleteReadError):
                pass
        return await self._send_on(await self._connect(), request)

    async def _send_on(self, connection: _Connection, request: bytes) -> _Answer:
        try:
            connection.writer.write(request)
            await connection.writer.drain()
            answer = await _read_answer(connection.reader)
        except BaseException:
            connection.close()  # half an exchange (or a cancelled one) leaves the connection unusable
            raise
        if answer.keep_alive and len(self._idle) < MAX_IDLE_CONNECTIONS:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            connection.close()
        return answer

    def _idle_connection(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()  # the most recently used: the least likely to be closing
            if connection.usable(now):
                return connection
            connection.close()
        return None

    async def _connect(self) -> _Connection:
        reader, writer = await asyncio.open_connection(
            self._host,
            self._port,
            ssl=self._tls,
            limit=MAX_HEAD_BYTES,
            server_hostname=self._host if self._tls else None,
        )
        return _Connection(reader, writer, asyncio.get_running_loop())


def _on_an_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _settle(answer: concurrent.futures.Future[bytes], done: asyncio.Future[bytes]) -> None:
    if done.cancelled():
        answer.cancel()
    elif (error := done.exception()) is not None:
        answer.set_exception(error)
    else:
        answer.set_result(done.result())


async def _read_answer(reader: asyncio.StreamReader) -> _Answer:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise RetrieverGone("closed before answering") from exc
    status_line, *header_lines = head[:-4].decode("latin-1").split("\r\n")
    try:
        status = int(status_line.split(" ", 2)[1])
    except (IndexError, ValueError):
        raise RetrieverGone(f"not an HTTP answer: {status_line[:40]!r}") from None
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip().lower()
    keep_alive = headers.get("connection") != "close"
    if "chunked" in headers.get("transfer-encoding", ""):
        return _Answer(status, await _read_chunked(reader), keep_alive)
    if "content-length" in headers:
        return _Answer(status, await reader.readexactly(int(headers["content-length"])), keep_alive)
    return _Answer(status, await reader.read(), keep_alive=False)  # delimited by the end of the connection


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailer fields, then the blank line
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
