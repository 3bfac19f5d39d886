"""A real HTTP proxy in front of the retriever, which a test puts between the worker and it: it forwards every
request, records each document write (which pages' chunks, and what it answered), and can refuse one write with
503 — the retriever briefly unavailable, as a network or a restart makes it — to fail one range of a long
document on the real stack."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

# Hop-by-hop headers and those httpx recomputes: never forwarded as they came.
_DROPPED = {"host", "content-length", "transfer-encoding", "connection", "content-encoding", "keep-alive"}


@dataclass(frozen=True)
class Write:
    document_id: str
    first_page: int | None
    chunks: int
    status: int


@dataclass
class ProxyState:
    target: str
    writes: list[Write] = field(default_factory=list)
    # Refuse the next write whose first chunk is on this page (once), then forget it.
    refuse_page: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refuse_once(self, page: int) -> None:
        with self.lock:
            self.refuse_page = page

    def writes_of(self, document_id: str) -> list[Write]:
        with self.lock:
            return [write for write in self.writes if write.document_id == document_id]

    def judge(self, method: str, path: str, body: bytes) -> tuple[Write | None, bool]:
        """The write this request is (None if it is none), and whether to refuse it."""
        parts = path.split("?", maxsplit=1)[0].split("/")
        if method != "PUT" or len(parts) < 2 or parts[-2] != "documents":
            return None, False
        chunks: list[dict[str, Any]] = json.loads(body)["chunks"]
        first_page = min((c["page"] for c in chunks if c["page"] is not None), default=None)
        with self.lock:
            refuse = first_page is not None and first_page == self.refuse_page
            if refuse:
                self.refuse_page = None
        return Write(parts[-1], first_page, len(chunks), 503 if refuse else 0), refuse

    def record(self, write: Write) -> None:
        with self.lock:
            self.writes.append(write)


def _handler(state: ProxyState, http: httpx.Client) -> type[BaseHTTPRequestHandler]:
    class Forward(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            write, refuse = state.judge(self.command, self.path, body)
            if refuse and write is not None:
                state.record(write)
                self._answer(
                    503, b'{"detail": "the proxy refused this write once"}', {"content-type": "application/json"}
                )
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _DROPPED}
            response = http.request(self.command, state.target + self.path, content=body, headers=headers)
            if write is not None:
                state.record(Write(write.document_id, write.first_page, write.chunks, response.status_code))
            kept = {k: v for k, v in response.headers.items() if k.lower() not in _DROPPED}
            self._answer(response.status_code, response.content, kept)

        def _answer(self, status: int, content: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        def do_GET(self) -> None:
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def do_PUT(self) -> None:
            self._forward()

        def do_DELETE(self) -> None:
            self._forward()

        def do_PATCH(self) -> None:
            self._forward()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Forward


@contextmanager
def retriever_proxy(target: str, port: int) -> Iterator[ProxyState]:
    """Listen on 127.0.0.1:`port`, forwarding to `target` (the retriever's base URL), until the block ends."""
    state = ProxyState(target.rstrip("/"))
    with httpx.Client(timeout=120) as http:
        server = ThreadingHTTPServer(("127.0.0.1", port), _handler(state, http))
        thread = threading.Thread(target=server.serve_forever, name="retriever-proxy", daemon=True)
        thread.start()
        try:
            yield state
        finally:
            server.shutdown()
            server.server_close()
