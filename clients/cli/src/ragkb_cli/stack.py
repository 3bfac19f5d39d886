"""A private ragkb on this machine: deploy/launcher.py (what `make run` starts) on free ports, with its own data
directory, its own service token and admin key, and a Redis of its own (a redis-server it starts, or a given
URL). What the benchmarks and the end-to-end tests run against, and what a team can start to test its own
application against a real ragkb.

Needs a checkout of the repository (the launcher) and its virtual environment's Python."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

READY_TIMEOUT_S = 900.0
# Longer than the launcher's longest stop: the worker's drain bound, then the retriever's, each with a margin.
STOP_TIMEOUT_S = 120.0
# An access line of the api's or the retriever's log (ragkb_http.observability): "… ragkb.http: GET /path 200 3.1 ms".
ACCESS_LINE = re.compile(r" INFO ragkb\.http: [A-Z]+ \S+ \d{3} [\d.]+ ms")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stack_env(workdir: Path, redis_url: str, **overrides: str) -> dict[str, str]:
    """The environment of a stack on `workdir`: free ports, data under it, fresh secrets, no rate limit (a
    benchmark's or a test's clients would otherwise measure the limiter). `overrides` win."""
    # Here, not at the top: the CLI package needs httpx alone, and a stack runs only from a checkout whose
    # environment holds the services' packages (ragkb_core among them).
    from ragkb_core.ids import new_secret

    env = {
        **os.environ,
        "RAGKB_API__PORT": str(free_port()),
        "RAGKB_RETRIEVER__PORT": str(free_port()),
        "RAGKB_WORKER__PORT": str(free_port()),
        "RAGKB_DATABASE__URL": f"sqlite:///{workdir / 'ragkb.db'}",
        "RAGKB_BLOBS__ROOT": str(workdir / "blobs"),
        "RAGKB_QDRANT__PATH": str(workdir / "index"),
        "RAGKB_REDIS__URL": redis_url,
        "RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY": new_secret(),
        "RAGKB_SERVICE_TOKEN": new_secret(),
        "RAGKB_RATE_LIMIT__REQUESTS_PER_MINUTE": "0",
    }
    env.pop("RAGKB_RETRIEVER__URL", None)  # the launcher derives it from the retriever's port
    return env | overrides


@dataclass(frozen=True)
class StackAddress:
    """Where a running stack answers, and the secrets to talk to it (its admin key, its service token)."""

    api_url: str
    retriever_url: str
    service_token: str
    admin_key: str


@dataclass
class PrivateStack:
    """The launcher of one stack, started and stopped as a whole (`restart()` does both)."""

    repo: Path
    workdir: Path
    env: dict[str, str]
    # The interpreter the launcher runs under: another checkout's own virtual environment runs that
    # checkout's code (an A/B benchmark of two versions); this process's by default.
    python: str = sys.executable
    log_path: Path = field(init=False)
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.log_path = self.workdir / "ragkb.log"

    @property
    def address(self) -> StackAddress:
        return StackAddress(
            api_url=self.api_url,
            retriever_url=f"http://127.0.0.1:{self.env['RAGKB_RETRIEVER__PORT']}",
            service_token=self.env["RAGKB_SERVICE_TOKEN"],
            admin_key=self.admin_key,
        )

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.env['RAGKB_API__PORT']}"

    @property
    def admin_key(self) -> str:
        return self.env["RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"]

    def start(self) -> None:
        self.start_command([self.python, str(self.repo / "deploy" / "launcher.py")], cwd=self.workdir)

    def start_command(self, command: list[str], *, cwd: Path, new_session: bool = False) -> None:
        """Start the stack with `command` (the launcher, or `make run`), in a process group of its own when
        `new_session` (as a shell job would be), and wait until it is ready."""
        self.process = _spawn(command, self.log_path, cwd, self.env, new_session=new_session)
        self.wait_ready()

    def stop(self) -> None:
        if self.process is not None:
            _terminate(self.process)

    def restart(self) -> None:
        self.stop()
        self.start()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"the launcher exited early; log:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.api_url}/ready", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"ragkb not ready within {timeout_s:.0f} s; log:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the stack's log without its access lines: a test or a benchmark polling a document fills
        the log with its own requests, and the tail would show those instead of what the services said."""
        if not self.log_path.exists():
            return ""
        lines = self.log_path.read_text(errors="replace").splitlines(keepends=True)
        return "".join(line for line in lines if not ACCESS_LINE.search(line))[-chars:]


@contextmanager
def private_stack(
    repo: Path, workdir: Path, *, python: str = sys.executable, **overrides: str
) -> Iterator[PrivateStack]:
    """A stack with a redis-server of its own (so that its worker can never take another run's tasks),
    started on `workdir` with `python` (PrivateStack.python) and stopped on exit."""
    redis_port = free_port()
    redis = _spawn(_redis_command(redis_port, workdir), workdir / "redis.log", workdir)
    try:
        _wait_redis(redis_port)
        env = stack_env(workdir, f"redis://127.0.0.1:{redis_port}/0", **overrides)
        stack = PrivateStack(repo, workdir, env, python)
        stack.start()
        try:
            yield stack
        finally:
            stack.stop()
    finally:
        _terminate(redis)


def _redis_command(port: int, workdir: Path) -> list[str]:
    return ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
            "--dir", str(workdir)]  # fmt: skip


def _spawn(
    command: list[str], log_path: Path, cwd: Path, env: dict[str, str] | None = None, *, new_session: bool = False
) -> subprocess.Popen[bytes]:
    # The child keeps its own copy of the log's file descriptor; ours closes at once.
    with log_path.open("ab") as log:
        return subprocess.Popen(
            command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=new_session
        )


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)  # the launcher stops its children on SIGTERM
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
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
