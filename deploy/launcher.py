"""Start retriever, worker and api together in the foreground (what `make run` does); Ctrl-C stops all.

Order: migrate the metadata database and prepare the embedding model once, then the retriever (the index
owner), the worker, and the api; each must answer before the next starts. If any process exits, all stop.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

STOP_GRACE_S = 15.0
ADMIN_KEY_FILE = Path("var") / "admin.key"
BOOTSTRAP_ENV = "RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"


@dataclass(frozen=True)
class Service:
    name: str
    module: str
    ready_url: str | None
    # Workers are disposable: one that dies (killed, out of memory) is started again, and the documents it
    # held are re-queued once their lease runs out. The api and retriever going down stops everything.
    restart_on_exit: bool = False


def _services(api_port: int, retriever_port: int, worker_port: int) -> list[Service]:
    return [
        Service("retriever", "ragkb_retriever", f"http://127.0.0.1:{retriever_port}/ready"),
        Service("worker", "ragkb_worker", f"http://127.0.0.1:{worker_port}/ready", restart_on_exit=True),
        Service("api", "ragkb_api", f"http://127.0.0.1:{api_port}/ready"),
    ]


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with status {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not become ready within {timeout_s:.0f} s")


def _ensure_secrets(env: dict[str, str]) -> str:
    """A fresh internal service token per run (unless one is set), and a bootstrap admin key: the configured
    one, or one generated once into var/admin.key (mode 0600). Returns how to get an admin key."""
    env.setdefault("RAGKB_SERVICE_TOKEN", secrets.token_urlsafe(32))
    if env.get(BOOTSTRAP_ENV):
        return f"the admin key is the value of {BOOTSTRAP_ENV}"
    if not ADMIN_KEY_FILE.exists():
        ADMIN_KEY_FILE.parent.mkdir(parents=True, exist_ok=True)
        # O_EXCL and the mode at creation: the key is never readable by others, not even for a moment.
        descriptor = os.open(ADMIN_KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
    env[BOOTSTRAP_ENV] = ADMIN_KEY_FILE.read_text().strip()
    return f"KEY=$(cat {ADMIN_KEY_FILE.resolve()})   # the admin key; send it as: Authorization: Bearer $KEY"


def _prepare(env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "ragkb_core.db"], env=env, check=True)
    subprocess.run([sys.executable, "-m", "ragkb_models.prepare"], env=env, check=True)


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in reversed(processes):
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        _kill_group(process.pid)


def _kill_group(pid: int) -> None:
    """Leave nothing behind: children a service did not stop itself (e.g. an orphaned pool process)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _supervise(services: list[Service], processes: list[subprocess.Popen[bytes]], env: dict[str, str]) -> int:
    while True:
        for index, (service, process) in enumerate(zip(services, processes, strict=True)):
            if process.poll() is None:
                continue
            if not service.restart_on_exit:
                print(f"launcher: {service.name} exited with status {process.returncode}; stopping all", flush=True)
                return 1
            print(f"launcher: {service.name} exited with status {process.returncode}; starting it again", flush=True)
            _kill_group(process.pid)  # its pool processes may have outlived it
            processes[index] = _start(service, env)
        time.sleep(0.5)


def _start(service: Service, env: dict[str, str]) -> subprocess.Popen[bytes]:
    # Each service in its own process group, so that stopping one also stops its children (Celery's pool).
    return subprocess.Popen([sys.executable, "-m", service.module], env=env, start_new_session=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ready-timeout", type=float, default=600.0)
    args = parser.parse_args()
    env = dict(os.environ)
    api_port = int(env.setdefault("RAGKB_API__PORT", "8000"))
    retriever_port = int(env.setdefault("RAGKB_RETRIEVER__PORT", "8001"))
    worker_port = int(env.setdefault("RAGKB_WORKER__PORT", "8002"))
    env.setdefault("RAGKB_RETRIEVER__URL", f"http://127.0.0.1:{retriever_port}")
    processes: list[subprocess.Popen[bytes]] = []
    # Ctrl-C and SIGTERM both end in the `finally` below, which stops every child.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        key_hint = _ensure_secrets(env)
        _prepare(env)
        services = _services(api_port, retriever_port, worker_port)
        for service in services:
            process = _start(service, env)
            processes.append(process)
            if service.ready_url:
                _wait_ready(service.ready_url, process, args.ready_timeout)
        print(
            f"\nragkb is up:\n  API        http://127.0.0.1:{api_port}\n"
            f"  Console    http://127.0.0.1:{api_port}/console (sign in with the admin key)\n"
            f"  OpenAPI    http://127.0.0.1:{api_port}/schema/swagger\n"
            f"  retriever  http://127.0.0.1:{retriever_port} (internal)\n"
            f"  worker     http://127.0.0.1:{worker_port}/ready (health only)\n"
            f"  admin key  {key_hint}\n"
            f"  client keys: POST /v1/api-keys with the admin key, or python -m ragkb_api.keys create --name NAME\n"
            "Press Ctrl-C to stop.\n",
            flush=True,
        )
        return _supervise(services, processes, env)
    except KeyboardInterrupt:
        return 0
    finally:
        _stop(processes)


if __name__ == "__main__":
    sys.exit(main())
