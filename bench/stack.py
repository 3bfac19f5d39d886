"""A private ragkb stack for a benchmark: deploy/launcher.py (what `make run` starts) on free ports, with its
own temporary data directory, its own Redis server, and a service token and admin key the benchmark knows.

Its own redis-server (not a database number on the shared one) so that its worker can never take another
run's tasks. The rate limit is off: a benchmark's eight clients would otherwise measure the limiter.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Stack:
    """Where a running stack answers and the secrets to talk to it."""

    api_url: str
    retriever_url: str
    service_token: str
    admin_key: str


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def local_stack(extra_env: dict[str, str] | None = None) -> Iterator[Stack]:
    """Start redis-server and the launcher on a temporary directory; stop both (and remove the data) on exit."""
    with tempfile.TemporaryDirectory(prefix="ragkb-bench-") as tmp:
        workdir = Path(tmp)
        redis_port = free_port()
        with _process(_redis_command(redis_port, workdir), workdir / "redis.log", workdir):
            _wait_redis(redis_port)
            env = _stack_env(workdir, redis_port) | (extra_env or {})
            stack = Stack(
                api_url=f"http://127.0.0.1:{env['RAGKB_API__PORT']}",
                retriever_url=f"http://127.0.0.1:{env['RAGKB_RETRIEVER__PORT']}",
                service_token=env["RAGKB_SERVICE_TOKEN"],
                admin_key=env["RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"],
            )
            log = workdir / "ragkb.log"
            command = [sys.executable, str(REPO / "deploy" / "launcher.py")]
            with _process(command, log, workdir, env) as launcher:
                _wait_ready(stack.api_url, launcher, log)
                yield stack


def _stack_env(workdir: Path, redis_port: int) -> dict[str, str]:
    env = {
        **os.environ,
        "RAGKB_API__PORT": str(free_port()),
        "RAGKB_RETRIEVER__PORT": str(free_port()),
        "RAGKB_WORKER__PORT": str(free_port()),
        "RAGKB_DATABASE__URL": f"sqlite:///{workdir / 'ragkb.db'}",
        "RAGKB_BLOBS__ROOT": str(workdir / "blobs"),
        "RAGKB_QDRANT__PATH": str(workdir / "index"),
        "RAGKB_REDIS__URL": f"redis://127.0.0.1:{redis_port}/0",
        "RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY": secrets.token_urlsafe(32),
        "RAGKB_SERVICE_TOKEN": secrets.token_urlsafe(32),
        "RAGKB_RATE_LIMIT__REQUESTS_PER_MINUTE": "0",
    }
    env.pop("RAGKB_RETRIEVER__URL", None)  # the launcher derives it from the retriever's port
    return env


def _redis_command(port: int, workdir: Path) -> list[str]:
    return ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
            "--dir", str(workdir)]  # fmt: skip


@contextmanager
def _process(
    command: list[str], log_path: Path, cwd: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)  # the launcher stops its children on SIGTERM
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_redis(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
                connection.sendall(b"PING\r\n")
                if connection.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"redis-server did not answer on port {port}")


def _wait_ready(api_url: str, launcher: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if launcher.poll() is not None:
            raise RuntimeError(f"the launcher exited early; log:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"{api_url}/ready", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"ragkb not ready within {READY_TIMEOUT_S:.0f} s; log:\n{log.read_text()[-4000:]}")
