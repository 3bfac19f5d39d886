"""One Lua script run in Redis from the event loop: the rate limit's take, made by every authenticated request.

Why not redis-py's asyncio client: one take through it cost ~0.2 ms of the api's CPU and ~0.2 ms of wall time,
against ~0.08–0.09 ms for the same EVALSHA through this client, same Redis, same loop (measured in process
2026-12-07; the api alone: bench/results/api-layer-ab-2026-12-07b.md). What a take needs of Redis is small:
RESP2 over a kept-alive connection, AUTH and SELECT once per connection, EVALSHA with EVAL when Redis has not
cached the script, and a bulk-string, integer or error answer. Everything else stays on redis-py.

Failures are redis-py's own exceptions (ConnectionError, TimeoutError, ResponseError: RedisError all), so the
rate limit treats a failed take here exactly as it did one through redis-py. A URL this client does not speak
(`unix://`, TLS options in the query) is served by redis-py's client instead: `script_runners` decides.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote, urlsplit

from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

# Idle connections kept per event loop; more are opened while that many takes are in flight at once.
MAX_IDLE_CONNECTIONS = 16
# A RESP answer line longer than this is not a take's.
MAX_LINE_BYTES = 64 * 1024

Answer = bytes | int | None


class ScriptRunner(Protocol):
    async def __call__(self, keys: Sequence[str], args: Sequence[float | int]) -> Answer: ...

    async def aclose(self) -> None: ...


def script_runners(url: str, script: str, timeout_s: float) -> Callable[[], ScriptRunner]:
    """A factory of runners of `script` (one per event loop: a connection belongs to the loop that opened it),
    on this module's client where the URL allows, else on redis-py's."""
    parts = urlsplit(url)
    if parts.scheme in {"redis", "rediss"} and not parts.query:
        return lambda: LeanScript(RedisAddress.of(url), script, timeout_s)
    return lambda: RedisPyScript(url, script, timeout_s)


class RedisPyScript:
    """The same script through redis-py's asyncio client, for the URLs LeanScript does not speak."""

    def __init__(self, url: str, script: str, timeout_s: float) -> None:
        self._client = AsyncRedis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._script = self._client.register_script(script)

    async def __call__(self, keys: Sequence[str], args: Sequence[float | int]) -> Answer:
        answer: Answer = await self._script(keys=list(keys), args=list(args))
        return answer

    async def aclose(self) -> None:
        await self._client.aclose()


@dataclass(frozen=True)
class RedisAddress:
    host: str
    port: int
    db: int
    username: str | None
    password: str | None
    tls: bool

    @classmethod
    def of(cls, url: str) -> RedisAddress:
        parts = urlsplit(url)
        path = parts.path.strip("/")
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 6379,
            db=int(path) if path else 0,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            tls=parts.scheme == "rediss",
        )


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def close(self) -> None:
        self.writer.close()


class LeanScript:
    """`await script(keys, args)`: the script's answer; redis-py's exceptions when Redis fails or refuses."""

    def __init__(self, address: RedisAddress, script: str, timeout_s: float) -> None:
        self._address = address
        self._script = script.encode()
        self._sha = hashlib.sha1(self._script, usedforsecurity=False).hexdigest().encode()
        self._timeout_s = timeout_s
        self._idle: deque[_Connection] = deque()

    async def __call__(self, keys: Sequence[str], args: Sequence[float | int]) -> Answer:
        tail = [str(len(keys)).encode(), *(key.encode() for key in keys), *(repr(arg).encode() for arg in args)]
        try:
            async with asyncio.timeout(self._timeout_s):
                answer = await self._run(tail)
        except TimeoutError as exc:
            raise RedisTimeoutError(f"Redis did not answer within {self._timeout_s} s") from exc
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            raise RedisConnectionError(f"Redis connection failed: {type(exc).__name__}") from exc
        if isinstance(answer, ResponseError):
            raise answer
        return answer

    async def _run(self, tail: list[bytes]) -> Answer | ResponseError:
        """On an idle connection, or a new one. An idle connection Redis closed meanwhile (a restart) fails
        before any answer: the script is sent once more, on a new connection."""
        if self._idle:
            try:
                return await self._run_on(self._idle.pop(), tail)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
        return await self._run_on(await self._connect(), tail)

    async def _run_on(self, connection: _Connection, tail: list[bytes]) -> Answer | ResponseError:
        try:
            answer = await _exchange(connection, _command(b"EVALSHA", self._sha, *tail))
            if isinstance(answer, ResponseError) and str(answer).startswith("NOSCRIPT"):
                # Redis restarted or flushed its scripts: EVAL runs it and caches it again.
                answer = await _exchange(connection, _command(b"EVAL", self._script, *tail))
        except BaseException:
            connection.close()  # half an exchange (or a cancelled one) leaves the connection unusable
            raise
        if len(self._idle) < MAX_IDLE_CONNECTIONS:
            self._idle.append(connection)
        else:
            connection.close()
        return answer

    async def aclose(self) -> None:
        while self._idle:
            self._idle.popleft().close()

    async def _connect(self) -> _Connection:
        address = self._address
        reader, writer = await asyncio.open_connection(
            address.host, address.port, ssl=ssl.create_default_context() if address.tls else None,
            limit=MAX_LINE_BYTES,
        )  # fmt: skip
        connection = _Connection(reader, writer)
        try:
            if address.password is not None:
                credentials = [address.username, address.password] if address.username else [address.password]
                await _expect_ok(connection, _command(b"AUTH", *(value.encode() for value in credentials)))
            if address.db:
                await _expect_ok(connection, _command(b"SELECT", str(address.db).encode()))
        except BaseException:
            connection.close()
            raise
        return connection


def _command(*parts: bytes) -> bytes:
    """A RESP array of bulk strings."""
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)


async def _exchange(connection: _Connection, command: bytes) -> Answer | ResponseError:
    connection.writer.write(command)
    return await _reply(connection.reader)


async def _expect_ok(connection: _Connection, command: bytes) -> None:
    answer = await _exchange(connection, command)
    if isinstance(answer, ResponseError):
        raise answer


async def _reply(reader: asyncio.StreamReader) -> Answer | ResponseError:
    """One RESP2 answer of a scalar kind: bulk string (None when nil), integer, simple string, or an error, which
    is returned (not raised) so that the connection can be kept: the exchange itself went well."""
    line = await reader.readuntil(b"\r\n")
    kind, value = line[:1], line[1:-2]
    if kind == b"$":
        length = int(value)
        return None if length < 0 else (await reader.readexactly(length + 2))[:-2]
    if kind == b":":
        return int(value)
    if kind == b"+":
        return value
    if kind == b"-":
        return ResponseError(value.decode("utf-8", "replace"))
    raise ValueError(f"not a scalar RESP answer: {line[:40]!r}")
