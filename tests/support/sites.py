"""Real servers the connector tests read: a small web site served by http.server in a thread, and bare Git
repositories served over HTTP by `git http-backend` (git's smart protocol, as a Git host serves it), run as a
CGI program from a thread's http.server."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class _QuietHandler(SimpleHTTPRequestHandler):
    # Set per server: the Authorization header a request must carry (None: none needed).
    required_authorization: str | None = None
    requests_seen: list[str]

    def do_GET(self) -> None:
        self.requests_seen.append(self.path)
        if self.required_authorization and self.headers.get("Authorization") != self.required_authorization:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="test"')
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve_folder(folder: Path, required_authorization: str | None = None) -> Iterator[tuple[str, list[str]]]:
    """Serve `folder` over HTTP on a free port; the base URL and the list of paths requested."""
    seen: list[str] = []
    handler = type(
        "Handler", (_QuietHandler,), {"required_authorization": required_authorization, "requests_seen": seen}
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args],
        cwd=cwd,
        capture_output=True,
        check=True,
        text=True,
    )
    return done.stdout


def make_repository(work: Path, files: dict[str, str], branch: str = "main") -> Path:
    """A working repository with `files` committed on `branch`."""
    work.mkdir(parents=True)
    git("init", "--quiet", "--initial-branch", branch, cwd=work)
    commit_files(work, files, "first")
    return work


def commit_files(work: Path, files: dict[str, str | None], message: str) -> None:
    """Write (or, for None, delete) files and commit them."""
    for name, text in files.items():
        path = work / name
        if text is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    git("add", "--all", cwd=work)
    git("commit", "--quiet", "-m", message, cwd=work)


def publish_bare(work: Path, bare: Path) -> None:
    """Push `work` to the bare repository `bare` (made on first use)."""
    if not bare.exists():
        git("init", "--quiet", "--bare", str(bare), cwd=work.parent)
    git("push", "--quiet", "--force", "--all", str(bare), cwd=work)


class _GitBackendHandler(BaseHTTPRequestHandler):
    project_root: str
    required_authorization: str | None = None

    def do_GET(self) -> None:
        self._backend()

    def do_POST(self) -> None:
        self._backend()

    def _backend(self) -> None:
        if self.required_authorization and self.headers.get("Authorization") != self.required_authorization:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        env = {
            "GIT_PROJECT_ROOT": self.project_root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            "REMOTE_ADDR": "127.0.0.1",
        }
        done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        headers = [line.split(":", 1) for line in head.decode().split("\r\n") if ":" in line]
        status = next((int(value.split()[0]) for name, value in headers if name.lower() == "status"), 200)
        self.send_response(status)
        for name, value in headers:
            if name.lower() != "status":
                self.send_header(name, value.strip())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve_git(project_root: Path, required_authorization: str | None = None) -> Iterator[str]:
    """Serve the bare repositories under `project_root` with `git http-backend`; the base URL."""
    attributes = {"project_root": str(project_root), "required_authorization": required_authorization}
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_GitBackendHandler,), attributes))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
