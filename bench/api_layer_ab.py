"""The api layer alone, two checkouts side by side: what the api adds to a search when the retriever costs nothing.

    python bench/api_layer_ab.py --baseline /work/main [--requests 800] [--label L]

Starts one api process per checkout (BASELINE/.venv/bin/python runs BASELINE's code; this checkout's venv runs
this one), each on its own SQLite database and one KB row, behind one stand-in retriever: a local HTTP/1.1
server that answers every search at once with the same 10-passage SearchResult (so nothing of the retriever's
time, and none of its noise, is in the figures). The rate limit is on, in Redis (database 13), as deployed (the
stacks of bench/latency_ab.py run without it). A client key with a read grant sends, per route, the requests
alternating A B B A: `POST /v1/search` (the async path), `POST /v1/tools/retrieve_text_nodes` (a sync handler
whose search is handed to the loop's client) and `GET /health` (the floor: uvicorn, Litestar, no work).

Per checkout and route: HTTP p50 and p95 (client's view, kept-alive connection) and the api's CPU per request
(/proc, every thread). Results: bench/results/api-layer-ab[-LABEL].json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from common import REPO, percentile, save_result
from profile_search import cpu_seconds

from ragkb_cli.stack import free_port

KB_ID = "01" + "K" * 24
HIT = {
    "chunk_id": "c" * 32,
    "text": "A passage of about the usual length, repeated to fill it out. " * 8,
    "score": 0.5,
    "knowledge_base_id": KB_ID,
    "document_id": "d" * 26,
    "source_id": "docs/handbook.md",
    "title": "Handbook",
    "version": 1,
    "ordinal": 0,
}
ANSWER = json.dumps({"results": [HIT] * 10, "took_ms": 1.0, "mode": "hybrid", "timings_ms": {"embed": 0.1}}).encode()
QUERY = "what is the boiling point of water at altitude"
ROUTES: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "search": ("POST", "/v1/search", {"query": QUERY, "knowledge_base_ids": [KB_ID], "top_k": 10}),
    "tools": ("POST", "/v1/tools/retrieve_text_nodes", {"query": QUERY, "knowledge_base_ids": [KB_ID], "top_k": 10}),
    "health": ("GET", "/health", None),
}
WARM_UP = 100
REDIS_URL = "redis://127.0.0.1:6379/13"


def stand_in_retriever(port: int) -> None:
    """Answers every request on a kept-alive connection: a search with ANSWER, anything else with `{}`."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                body = ANSWER if b"/search" in head.split(b"\r\n", 1)[0] else b"{}"
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
                )
                writer.write(body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()


@dataclass
class Api:
    name: str
    process: subprocess.Popen[bytes]
    http: httpx.Client
    ms: dict[str, list[float]] = field(default_factory=dict)
    cpu_ms: dict[str, float] = field(default_factory=dict)


def start_api(
    name: str, repo: Path, workdir: Path, retriever_port: int, *, grant: str = "read", redis_url: str = REDIS_URL
) -> Api:
    """`name`'s api on its own SQLite database holding KB_ID, and a client with a key of `grant` on it."""
    port, admin = free_port(), secrets.token_urlsafe(32)
    database = f"sqlite:///{workdir / 'ragkb.db'}"
    env = os.environ | {
        "RAGKB_API__PORT": str(port),
        "RAGKB_DATABASE__URL": database,
        "RAGKB_BLOBS__ROOT": str(workdir / "blobs"),
        "RAGKB_REDIS__URL": redis_url,
        "RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY": admin,
        "RAGKB_SERVICE_TOKEN": secrets.token_urlsafe(16),
        "RAGKB_RETRIEVER__URL": f"http://127.0.0.1:{retriever_port}",
        # On, and never reached: each request pays for its take, none is refused.
        "RAGKB_RATE_LIMIT__REQUESTS_PER_MINUTE": "60000000",
        "RAGKB_RATE_LIMIT__BURST": "10000000",
    }
    python = str(repo / ".venv" / "bin" / "python")
    log = (workdir / "api.log").open("wb")
    process = subprocess.Popen([python, "-m", "ragkb_api"], cwd=repo, env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    wait_until_healthy(base)
    add_kb = (
        "from ragkb_store.db.engine import build_engine, build_session_factory\n"
        "from ragkb_store.db.models import KnowledgeBase\n"
        "from ragkb_core.settings import DatabaseSettings\n"
        f"sessions = build_session_factory(build_engine(DatabaseSettings(url={database!r})))\n"
        "with sessions() as session:\n"
        f"    session.add(KnowledgeBase(id={KB_ID!r}, name='bench', embedding_model='m', analyzer_version='v'))\n"
        "    session.commit()\n"
    )
    subprocess.run([python, "-c", add_kb], cwd=repo, check=True)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {admin}"}) as http:
        created = http.post("/v1/api-keys", json={"name": "bench", "role": "client", "grants": {KB_ID: grant}})
        key = created.raise_for_status().json()["key"]
    return Api(name, process, httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}))


def wait_until_healthy(base: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/health").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the api at {base} did not start")


def send(api: Api, route: str) -> float:
    method, path, body = ROUTES[route]
    started = time.perf_counter()
    response = api.http.request(method, path, json=body)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"{api.name} {path}: {response.status_code} {response.text[:300]}")
    return elapsed


def measure(apis: list[Api], requests: int) -> None:
    for route in ROUTES:
        for api in apis:
            for _ in range(WARM_UP):
                send(api, route)
        before = [cpu_seconds(api.process.pid) for api in apis]
        for number in range(requests):
            for api in apis if number % 2 == 0 else reversed(apis):
                api.ms.setdefault(route, []).append(send(api, route))
        for api, cpu in zip(apis, before, strict=True):
            api.cpu_ms[route] = round((cpu_seconds(api.process.pid) - cpu) * 1000 / requests, 3)


def markdown(result: dict[str, Any]) -> str:
    names = [side["name"] for side in result["sides"]]
    lines = [
        f"The api layer alone (stand-in retriever answering at once), {result['requests']} requests per route and "
        f"checkout, alternating; baseline `{result['baseline']}` against this checkout. Load average "
        f"{result['load_average']} → {result['load_average_end']}.",
        "",
        f"| route | {names[0]} p50 / p95 ms | {names[1]} p50 / p95 ms | p50 ratio | {names[0]} CPU ms | "
        f"{names[1]} CPU ms | CPU ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    a, b = result["sides"]
    for route in ROUTES:
        pa, pb = a["http_ms"][route], b["http_ms"][route]
        ca, cb = a["cpu_ms"][route], b["cpu_ms"][route]
        lines.append(
            f"| {ROUTES[route][0]} {ROUTES[route][1]} | {pa['p50']} / {pa['p95']} | {pb['p50']} / {pb['p95']} | "
            f"{round(pb['p50'] / pa['p50'], 2)} | {ca} | {cb} | {round(cb / ca, 2) if ca else '—'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout with its own .venv")
    parser.add_argument("--requests", type=int, default=800, help="measured requests per route and checkout")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    retriever_port = free_port()
    stand_in_retriever(retriever_port)
    load = Path("/proc/loadavg").read_text().split()[0]
    apis: list[Api] = []
    with tempfile.TemporaryDirectory(prefix="ragkb-api-ab-") as tmp:
        try:
            for name, repo in (("baseline", args.baseline), ("this", REPO)):
                workdir = Path(tmp) / name
                workdir.mkdir()
                apis.append(start_api(name, repo, workdir, retriever_port))
            measure(apis, args.requests)
        finally:
            for api in apis:
                api.http.close()
                api.process.terminate()
                api.process.wait()
    result = {
        "baseline": str(args.baseline),
        "requests": args.requests,
        "load_average": load,
        "load_average_end": Path("/proc/loadavg").read_text().split()[0],
        "sides": [
            {
                "name": api.name,
                "http_ms": {
                    route: {"p50": round(percentile(ms, 50), 3), "p95": round(percentile(ms, 95), 3)}
                    for route, ms in api.ms.items()
                },
                "cpu_ms": api.cpu_ms,
            }
            for api in apis
        ],
    }
    save_result(f"api-layer-ab-{args.label}" if args.label else "api-layer-ab", result, markdown(result))


if __name__ == "__main__":
    main()
