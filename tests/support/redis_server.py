"""A redis-server of a test's own, on a free port, that the test may restart: the shared Redis on 6379 is
everyone's and must never be restarted."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

START_TIMEOUT_S = 10.0


class RedisServer:
    """redis-server started as the machine starts its own: nothing persisted (`--save "" --appendonly no`), so
    a restart loses every queued message."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        command = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
                   "--dir", str(self.directory)]  # fmt: skip
        with (self.directory / "redis.log").open("ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers(self.port):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}; see {self.directory}/redis.log")
            time.sleep(0.05)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=30)

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def redis_server(directory: Path) -> Iterator[RedisServer]:
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
