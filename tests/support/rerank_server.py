"""A rerank service of the common `/rerank` shape (Cohere, Jina, Text Embeddings Inference, Infinity) that serves
ragkb's own cross-encoder code path: the tests start it as a process of its own and the retriever's HTTP reranker
calls it over real HTTP.

    python -m tests.support.rerank_server MODEL_FOLDER [--api-key KEY] [--delay-ms N]

It prints `listening on PORT` once it answers. POST /rerank takes {query, documents | texts, top_n?, model?} and
answers {model, results: [{index, relevance_score}]} best first (Cohere's shape), or TEI's bare list of
{index, score} when the passages came as `texts`; 401 without the Bearer key when one is set."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ragkb_models.cross_encoder import CrossEncoderModel, load_cross_encoder
from ragkb_retriever.reranking import to_unit_interval

REPO = Path(__file__).resolve().parents[2]
MAX_LENGTH = 128
START_TIMEOUT_S = 120.0


class RerankHandler(BaseHTTPRequestHandler):
    model: CrossEncoderModel
    api_key: str | None
    delay_s: float
    lock = threading.Lock()  # the tokenizer is not safe across threads (reranking._ModelSlot says why)

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/rerank":
            return self._answer(404, {"error": f"no route {self.path}"})
        if self.api_key is not None and self.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._answer(401, {"error": "invalid api key"})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        texts = body.get("documents") or body.get("texts") or []
        time.sleep(self.delay_s)
        with self.lock:
            scores = to_unit_interval(self.model.logits([(body["query"], text) for text in texts], batch_size=8))
        ranked = sorted(range(len(texts)), key=lambda index: -scores[index])[: body.get("top_n") or len(texts)]
        if "texts" in body:  # TEI's answer
            return self._answer(200, [{"index": index, "score": scores[index]} for index in ranked])
        results = [{"index": index, "relevance_score": scores[index]} for index in ranked]
        return self._answer(200, {"model": body.get("model"), "results": results})

    def _answer(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def running_rerank_server(model: Path, api_key: str | None = None, delay_ms: int = 0) -> Iterator[str]:
    """Start the server as a process of its own; yields its /rerank URL, and stops it afterwards."""
    command = [sys.executable, "-m", "tests.support.rerank_server", str(model), "--delay-ms", str(delay_ms)]
    if api_key is not None:
        command += ["--api-key", api_key]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{_port_from(process)}/rerank"
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def _port_from(process: subprocess.Popen[str]) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.startswith("listening on "):
            return int(line.split()[-1])
        if not line and process.poll() is not None:
            break
    raise RuntimeError("the rerank server did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", type=Path)
    parser.add_argument("--api-key")
    parser.add_argument("--delay-ms", type=int, default=0)
    args = parser.parse_args()
    RerankHandler.model = load_cross_encoder(str(args.model), MAX_LENGTH, "cpu")
    RerankHandler.api_key = args.api_key
    RerankHandler.delay_s = args.delay_ms / 1000
    server = ThreadingHTTPServer(("127.0.0.1", 0), RerankHandler)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
