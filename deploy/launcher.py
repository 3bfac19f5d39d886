"""Start retriever, worker and api together in the foreground (what `make run` does); Ctrl-C stops all.

Order: migrate the metadata database and prepare the embedding model once, then start the retriever (the index
owner), the worker and the api together, and wait until each answers. They start at once because most of a
start is importing and loading models, which overlap: 12–14 s to the banner against 17–18 s one after another
(2 cores, 2026-12-07). Nothing waits on that order: the api's /ready includes the retriever's, and the worker
reaches the retriever only for a task. A service that exits afterwards (crashed, killed, out of memory) is
started again after a backoff, and the launcher says so.

Stopping (Ctrl-C, SIGTERM, SIGHUP) drains: the api and the worker finish what they have in flight within their
bounds (RAGKB_API__DRAIN_S, RAGKB_WORKER__DRAIN_S), then the retriever, which they may call meanwhile, stops
within its own; whatever is left of a service then, its process group included, is killed. Signals that
arrive while stopping change nothing: `make` forwards its own SIGTERM to the launcher, and a process manager
may send several.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ragkb_api.settings import ApiSettings
from ragkb_core.ids import new_secret
from ragkb_core.settings import HttpServerSettings
from ragkb_retriever.settings import RetrieverSettings
from ragkb_worker.settings import WorkerSettings

ADMIN_KEY_FILE = Path("var") / "admin.key"
BOOTSTRAP_ENV = "RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Beyond its drain bound, what a service may take to close (the index, the task pool) before it is killed.
STOP_MARGIN_S = 10.0
# A service that exits again soon after each start waits longer each time: 1, 2, 4 … 30 s.
RESTART_FIRST_DELAY_S = 1.0
RESTART_MAX_DELAY_S = 30.0
# One that ran at least this long before it exited starts again after the first delay.
STABLE_AFTER_S = 60.0
TICK_S = 0.5
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Service:
    name: str
    module: str
    ready_url: str
    # How long it lets work in flight finish after SIGTERM (its own setting, which it enforces itself).
    drain_s: float
    # Stopped after the others, which may still call it while they drain.
    stops_last: bool = False


def _services() -> list[Service]:
    """Where each service listens and how long it drains, as the service itself will read its settings."""
    retriever, worker, api = RetrieverSettings().retriever, WorkerSettings().worker, ApiSettings().api
    return [
        Service("retriever", "ragkb_retriever", _ready_url(retriever), retriever.drain_s, stops_last=True),
        Service("worker", "ragkb_worker", _ready_url(worker), worker.drain_s),
        Service("api", "ragkb_api", _ready_url(api), api.drain_s),
    ]


def _ready_url(server: HttpServerSettings) -> str:
    host = "127.0.0.1" if server.host in ("0.0.0.0", "::", "") else server.host
    return f"http://{host}:{server.port}/ready"


def _say(message: str) -> None:
    print(f"launcher: {message}", flush=True)


class StopRequest:
    """Remembers the first stop signal. The handler never raises: an exception thrown into the start-up or the
    clean-up half-way (a second SIGTERM used to do that) leaves services running with no parent."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def install(self) -> None:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._record)

    def _record(self, signum: int, _frame: object) -> None:
        if self.signal is None:
            self.signal = signum

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake within a tick of a stop request."""
        deadline = time.monotonic() + seconds
        while not self.requested and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(TICK_S, left))


class Child:
    """One service's process, started again with a growing delay while it keeps exiting soon after a start."""

    def __init__(self, service: Service, env: dict[str, str]) -> None:
        self.service = service
        self._env = env
        self.process: subprocess.Popen[bytes] | None = None
        self._started_at = 0.0
        self._quick_exits = 0
        self._restart_at = 0.0
        self._announce_ready = False

    def start(self) -> subprocess.Popen[bytes]:
        # Its own process group (so that stopping it reaches its children, Celery's pool); and SIGTERM should
        # the launcher itself die without cleaning up (SIGKILL), so that nothing is left without a parent.
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.service.module],
            env=self._env,
            start_new_session=True,
            preexec_fn=_terminate_with_parent,  # noqa: PLW1509 (the launcher runs no threads)
        )
        self._started_at = time.monotonic()
        return self.process

    def supervise(self, now: float) -> None:
        """One look: restart it when its delay is over, note that it exited, or say when it is ready again."""
        if self.process is None:
            if now >= self._restart_at:
                process = self.start()
                self._announce_ready = True
                _say(f"{self.service.name} started again (pid {process.pid})")
            return
        status = self.process.poll()
        if status is None:
            if self._announce_ready and _answers(self.service.ready_url, timeout_s=1):
                self._announce_ready = False
                _say(f"{self.service.name} is ready again")
            return
        _kill_group(self.process.pid)  # its pool processes may have outlived it
        ran_s = now - self._started_at
        self._quick_exits = 0 if ran_s >= STABLE_AFTER_S else self._quick_exits + 1
        delay = min(RESTART_MAX_DELAY_S, RESTART_FIRST_DELAY_S * 2 ** max(0, self._quick_exits - 1))
        _say(
            f"{self.service.name} exited ({_describe(status)}) after {ran_s:.0f} s; starting it again in {delay:.0f} s"
        )
        self.process = None
        self._restart_at = now + delay

    def terminate(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        _signal_group(self.process.pid, signal.SIGCONT)  # a paused (SIGSTOP) service must act on it too

    def wait_or_kill(self, deadline: float) -> None:
        """Wait for it to drain and exit until `deadline`, then kill what is left of its process group."""
        if self.process is None:
            return
        try:
            self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _say(f"{self.service.name} did not stop in time; killing it")
        _kill_group(self.process.pid)
        self.process.wait()


def _stop(children: list[Child]) -> None:
    """Callers of the retriever first (they drain while it still answers), then the retriever; every process
    group is killed at the end, whatever state its service was in."""
    for last in (False, True):
        group = [child for child in children if child.service.stops_last is last]
        for child in group:
            child.terminate()
        deadline = time.monotonic() + max((child.service.drain_s for child in group), default=0) + STOP_MARGIN_S
        for child in group:
            child.wait_or_kill(deadline)


def _wait_ready(children: list[Child], stop: StopRequest, timeout_s: float) -> bool:
    """True once every service answers; False when a stop was asked for meanwhile. One that exits first ends the
    start, whichever it is, rather than after the others it was started beside."""
    deadline = time.monotonic() + timeout_s
    waiting = list(children)
    while not stop.requested:
        for child in list(waiting):
            assert child.process is not None  # started by the caller
            if child.process.poll() is not None:
                status = _describe(child.process.returncode)
                raise RuntimeError(f"{child.service.name} exited ({status}) before it was ready")
            if _answers(child.service.ready_url, timeout_s=2):
                waiting.remove(child)
        if not waiting:
            return True
        if time.monotonic() > deadline:
            urls = ", ".join(child.service.ready_url for child in waiting)
            raise RuntimeError(f"{urls} did not become ready within {timeout_s:.0f} s")
        stop.sleep(TICK_S)
    return False


def _answers(url: str, timeout_s: float) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _describe(status: int) -> str:
    return f"signal {signal.Signals(-status).name}" if status < 0 else f"status {status}"


def _kill_group(pid: int) -> None:
    """Leave nothing behind: children a service did not stop itself (e.g. an orphaned pool process)."""
    _signal_group(pid, signal.SIGKILL)


def _signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _terminate_with_parent() -> None:
    """In the child before it runs the service (Linux): SIGTERM when the launcher dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _ensure_secrets(env: dict[str, str]) -> str:
    """A fresh internal service token per run (unless one is set), and a bootstrap admin key: the configured
    one, or one generated once into var/admin.key (mode 0600). Returns how to get an admin key."""
    env.setdefault("RAGKB_SERVICE_TOKEN", new_secret())
    if env.get(BOOTSTRAP_ENV):
        return f"the admin key is the value of {BOOTSTRAP_ENV}"
    if not ADMIN_KEY_FILE.exists():
        ADMIN_KEY_FILE.parent.mkdir(parents=True, exist_ok=True)
        # O_EXCL and the mode at creation: the key is never readable by others, not even for a moment.
        descriptor = os.open(ADMIN_KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(new_secret() + "\n")
    env[BOOTSTRAP_ENV] = ADMIN_KEY_FILE.read_text().strip()
    return f"KEY=$(cat {ADMIN_KEY_FILE.resolve()})   # the admin key; send it as: Authorization: Bearer $KEY"


def _prepare(env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "ragkb_store.db"], env=env, check=True)
    subprocess.run([sys.executable, "-m", "ragkb_models.prepare"], env=env, check=True)


def _supervise(children: list[Child], stop: StopRequest) -> None:
    while not stop.requested:
        now = time.monotonic()
        for child in children:
            child.supervise(now)
        stop.sleep(TICK_S)


def _banner(services: list[Service], key_hint: str) -> str:
    api, retriever, worker = (next(s for s in services if s.name == name) for name in ("api", "retriever", "worker"))
    api_base = api.ready_url.removesuffix("/ready")
    return (
        f"\nragkb is up:\n  API        {api_base}\n"
        f"  Console    {api_base}/console (sign in with the admin key)\n"
        f"  OpenAPI    {api_base}/schema/swagger\n"
        f"  retriever  {retriever.ready_url.removesuffix('/ready')} (internal)\n"
        f"  worker     {worker.ready_url} (health only)\n"
        f"  admin key  {key_hint}\n"
        f"  client keys: POST /v1/api-keys with the admin key, or python -m ragkb_api.keys create --name NAME\n"
        "Press Ctrl-C to stop.\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ready-timeout", type=float, default=600.0)
    args = parser.parse_args()
    stop = StopRequest()
    stop.install()
    services = _services()
    env = dict(os.environ)
    retriever = next(service for service in services if service.name == "retriever")
    env.setdefault("RAGKB_RETRIEVER__URL", retriever.ready_url.removesuffix("/ready"))
    children: list[Child] = []
    try:
        key_hint = _ensure_secrets(env)
        _prepare(env)
        for service in services:
            if stop.requested:
                break
            child = Child(service, env)
            child.start()
            children.append(child)
        if len(children) == len(services) and _wait_ready(children, stop, args.ready_timeout):
            print(_banner(services, key_hint), flush=True)
            _supervise(children, stop)
    except subprocess.CalledProcessError:
        if not stop.requested:  # a preparation step interrupted by the same signal is no error
            raise
    finally:
        if stop.signal is not None:
            _say(f"{signal.Signals(stop.signal).name} received; stopping (further signals are ignored)")
        _stop(children)
        _say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
