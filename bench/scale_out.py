"""Scale-out on one machine: N api processes and N worker processes against one retriever, one PostgreSQL and
one Redis, compared with 1 of each, and the per-key rate limit shared across the api replicas.

For each shape (default 1×1 and 2×2) it starts a private stack — its own redis-server, a fresh PostgreSQL
database (RAGKB_TEST_POSTGRES_URL or postgresql+psycopg://postgres@127.0.0.1:5432/test as admin), one retriever
(Qdrant Edge: one process owns an embedded index; with a Qdrant server the retriever would be replicated too),
N workers of one task process each, N apis — then, spreading requests over the apis round-robin as a load
balancer would:

- ingest: --documents SciFact abstracts through the batch endpoint (--batch-size per request), timed until
  every document is `done` → documents/s and chunks/s;
- query: --clients threads send hybrid searches (SciFact queries) for --query-seconds → queries/s, p50, p95;
- rate limit: the apis restarted with RAGKB_RATE_LIMIT__BURST=--burst and one token a minute, then 2 × burst
  requests of one key alternated over the apis, with the buckets in Redis (the default) and in each process
  (`memory`): allowed requests = the burst once when shared, N times it when not.

Results: bench/results/scale-out.json and .md. On a 2-core machine the embedder is CPU-bound, so a second
worker process adds what the first leaves idle (parsing, database and HTTP waits), not a second machine's worth;
the figures say what one machine gives, not what a cluster does.

    python bench/scale_out.py [--shapes 1 2] [--documents 300] [--clients 4] [--query-seconds 30]
"""

from __future__ import annotations

import argparse
import itertools
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
from common import DATA, percentile, read_jsonl, save_result
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

POSTGRES_ADMIN_URL = os.environ.get("RAGKB_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
READY_TIMEOUT_S = 600.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Cluster:
    """Where one shape's processes answer."""

    api_urls: list[str]
    admin_key: str
    env: dict[str, str]
    workdir: Path


# -- processes -----------------------------------------------------------------------------------------


class Processes:
    """Started processes, each in its own process group (Celery forks its pool), stopped in reverse order."""

    def __init__(self, workdir: Path) -> None:
        self._workdir = workdir
        self._started: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with (self._workdir / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                command, cwd=self._workdir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._started.append(process)
        return process

    def stop(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._started.remove(process)

    def stop_module(self, module: str) -> None:
        for process in [p for p in self._started if module in p.args]:
            self.stop(process)

    def stop_all(self) -> None:
        for process in reversed(list(self._started)):
            self.stop(process)

    def wait_ready(self, url: str, process: subprocess.Popen[bytes], name: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log = (self._workdir / f"{name}.log").read_text()[-3000:]
                raise SystemExit(f"{name} exited with {process.returncode}:\n{log}")
            try:
                if httpx.get(url, timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"{name} not ready at {url} within {READY_TIMEOUT_S:.0f} s")


@contextmanager
def fresh_database() -> Iterator[str]:
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"ragkb_scale_{uuid.uuid4().hex[:8]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def base_env(workdir: Path, database_url: str, redis_port: int) -> dict[str, str]:
    retriever_port = free_port()
    env = {
        **os.environ,
        "RAGKB_DATABASE__URL": database_url,
        "RAGKB_REDIS__URL": f"redis://127.0.0.1:{redis_port}/0",
        "RAGKB_BLOBS__ROOT": str(workdir / "blobs"),
        "RAGKB_QDRANT__PATH": str(workdir / "index"),
        "RAGKB_RETRIEVER__PORT": str(retriever_port),
        "RAGKB_RETRIEVER__URL": f"http://127.0.0.1:{retriever_port}",
        "RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY": secrets.token_urlsafe(32),
        "RAGKB_SERVICE_TOKEN": secrets.token_urlsafe(32),
        # Throughput phases: no limit (their clients would measure the limiter); the rate-limit phase sets one.
        "RAGKB_RATE_LIMIT__REQUESTS_PER_MINUTE": "0",
        # One task process per worker: the shape's worker count is its count of embedders.
        "RAGKB_TASKS__CONCURRENCY": "1",
    }
    return env


@contextmanager
def cluster(replicas: int) -> Iterator[tuple[Cluster, Processes]]:
    """redis-server, a fresh database, the retriever, `replicas` workers and `replicas` apis."""
    with tempfile.TemporaryDirectory(prefix="ragkb-scale-out-") as tmp, fresh_database() as database_url:
        workdir = Path(tmp)
        processes = Processes(workdir)
        try:
            redis_port = free_port()
            redis_command = ["redis-server", "--bind", "127.0.0.1", "--port", str(redis_port), "--save", "",
                             "--appendonly", "no", "--dir", str(workdir)]  # fmt: skip
            processes.start("redis", redis_command, dict(os.environ))
            env = base_env(workdir, database_url, redis_port)
            subprocess.run([sys.executable, "-m", "ragkb_store.db"], env=env, check=True, capture_output=True)
            retriever = processes.start("retriever", [sys.executable, "-m", "ragkb_retriever"], env)
            processes.wait_ready(f"{env['RAGKB_RETRIEVER__URL']}/ready", retriever, "retriever")
            for number in range(1, replicas + 1):
                start_worker(processes, env, number)
            urls = start_apis(processes, env, replicas)
            yield Cluster(urls, env["RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"], env, workdir), processes
        except BaseException:
            for log in sorted(workdir.glob("*.log")):  # the temporary directory goes with the failure
                print(f"--- {log.name}\n{log.read_text()[-2500:]}", file=sys.stderr)
            raise
        finally:
            processes.stop_all()


def start_worker(processes: Processes, env: dict[str, str], number: int) -> None:
    port = free_port()
    name = f"worker-{number}"
    worker = processes.start(name, [sys.executable, "-m", "ragkb_worker"], env | {"RAGKB_WORKER__PORT": str(port)})
    processes.wait_ready(f"http://127.0.0.1:{port}/ready", worker, name)


def start_apis(
    processes: Processes, env: dict[str, str], replicas: int, extra: dict[str, str] | None = None
) -> list[str]:
    started = []
    for number in range(1, replicas + 1):
        port = free_port()
        api_env = env | {"RAGKB_API__PORT": str(port)} | (extra or {})
        started.append((processes.start(f"api-{number}", [sys.executable, "-m", "ragkb_api"], api_env), port))
    for number, (api, port) in enumerate(started, 1):
        processes.wait_ready(f"http://127.0.0.1:{port}/ready", api, f"api-{number}")
    return [f"http://127.0.0.1:{port}" for _, port in started]


# -- phases ----------------------------------------------------------------------------------------------


class RoundRobin:
    """One httpx client per api, handed out in turn: what a load balancer in front of the replicas does."""

    def __init__(self, urls: list[str], key: str) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        self.clients = [httpx.Client(base_url=url, headers=headers, timeout=120) for url in urls]
        self._next = itertools.cycle(self.clients)
        self._lock = threading.Lock()

    def next(self) -> httpx.Client:
        with self._lock:
            return next(self._next)

    def close(self) -> None:
        for client in self.clients:
            client.close()


def ingest(apis: RoundRobin, documents: list[dict[str, Any]], batch_size: int) -> dict[str, Any]:
    created = apis.next().post("/v1/knowledge-bases", json={"name": "scale-out"})
    created.raise_for_status()
    kb_id = created.json()["id"]
    batches = [documents[i : i + batch_size] for i in range(0, len(documents), batch_size)]
    started = time.perf_counter()
    for batch in batches:
        items = [{"source_id": d["_id"], "title": d.get("title") or d["_id"], "text": d["text"]} for d in batch]
        response = apis.next().post(f"/v1/knowledge-bases/{kb_id}/documents/batch", json={"documents": items})
        response.raise_for_status()
    while True:
        counts = apis.next().get(f"/v1/knowledge-bases/{kb_id}").json()["document_counts"]
        if counts.get("done", 0) + counts.get("failed", 0) >= len(documents):
            break
        time.sleep(0.5)
    seconds = time.perf_counter() - started
    listed = apis.next().get(f"/v1/knowledge-bases/{kb_id}/documents").json()
    chunks = sum(document["chunk_count"] for document in listed)
    return {
        "kb_id": kb_id,
        "documents": len(documents),
        "failed": counts.get("failed", 0),
        "chunks": chunks,
        "seconds": round(seconds, 1),
        "documents_per_s": round(len(documents) / seconds, 2),
        "chunks_per_s": round(chunks / seconds, 2),
    }


def query(apis: RoundRobin, kb_id: str, queries: list[str], clients: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    texts = itertools.cycle(queries)

    def client_loop() -> None:
        nonlocal errors
        while time.monotonic() < stop_at:
            with lock:
                body = {"query": next(texts), "knowledge_base_ids": [kb_id], "mode": "hybrid", "top_k": 10}
            started = time.perf_counter()
            response = apis.next().post("/v1/search", json=body)
            elapsed = (time.perf_counter() - started) * 1000
            with lock:
                if response.status_code == 200:
                    latencies.append(elapsed)
                else:
                    errors += 1

    for warm in queries[:10]:  # every api and the retriever warm
        apis.next().post("/v1/search", json={"query": warm, "knowledge_base_ids": [kb_id]}).raise_for_status()
    threads = [threading.Thread(target=client_loop) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "clients": clients,
        "seconds": seconds,
        "queries": len(latencies),
        "errors": errors,
        "queries_per_s": round(len(latencies) / seconds, 1),
        "p50_ms": round(percentile(latencies, 50), 1) if latencies else None,
        "p95_ms": round(percentile(latencies, 95), 1) if latencies else None,
    }


def rate_limit(shape: Cluster, processes: Processes, replicas: int, burst: int) -> dict[str, Any]:
    """Allowed requests of one key sending 2 × burst alternated over the apis, per bucket store."""
    result: dict[str, Any] = {"burst": burst, "requests": 2 * burst}
    for store in ("redis", "memory"):
        apis = restart_apis(shape, processes, replicas, {
            "RAGKB_RATE_LIMIT__REQUESTS_PER_MINUTE": "1", "RAGKB_RATE_LIMIT__BURST": str(burst),
            "RAGKB_RATE_LIMIT__STORE": store,
        })  # fmt: skip
        round_robin = RoundRobin(apis, shape.admin_key)
        statuses = [round_robin.next().get("/v1/knowledge-bases").status_code for _ in range(2 * burst)]
        round_robin.close()
        result[store] = {"allowed": statuses.count(200), "refused": statuses.count(429)}
        flush_buckets(shape)  # the next store starts the key with a full bucket again
    return result


def restart_apis(shape: Cluster, processes: Processes, replicas: int, extra: dict[str, str]) -> list[str]:
    processes.stop_module("ragkb_api")
    return start_apis(processes, shape.env, replicas, extra)


def flush_buckets(shape: Cluster) -> None:
    connection = redis.Redis.from_url(shape.env["RAGKB_REDIS__URL"])
    for key in connection.scan_iter("ragkb:rate:*"):
        connection.delete(key)
    connection.close()


def measure(
    replicas: int, args: argparse.Namespace, corpus: list[dict[str, Any]], queries: list[str]
) -> dict[str, Any]:
    print(f"== {replicas} api + {replicas} worker processes + 1 retriever", flush=True)
    with cluster(replicas) as (shape, processes), ExitStack() as stack:
        apis = RoundRobin(shape.api_urls, shape.admin_key)
        stack.callback(apis.close)
        ingested = ingest(apis, corpus, args.batch_size)
        print(f"   ingest: {ingested}", flush=True)
        searched = query(apis, ingested["kb_id"], queries, args.clients, args.query_seconds)
        print(f"   query:  {searched}", flush=True)
        limited = rate_limit(shape, processes, replicas, args.burst) if replicas > 1 else None
        if limited:
            print(f"   rate limit: {limited}", flush=True)
        return {"replicas": replicas, "ingest": ingested, "query": searched, "rate_limit": limited}


def markdown(result: dict[str, Any]) -> str:
    rows = [
        "| api × worker processes | docs/s | chunks/s | ingest ratio | hybrid q/s | p50 / p95 ms | query ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    base = result["shapes"][0]
    for shape in result["shapes"]:
        ingest, query = shape["ingest"], shape["query"]
        rows.append(
            f"| {shape['replicas']} × {shape['replicas']} | {ingest['documents_per_s']} | {ingest['chunks_per_s']} | "
            f"{ingest['chunks_per_s'] / base['ingest']['chunks_per_s']:.2f}× | {query['queries_per_s']} | "
            f"{query['p50_ms']} / {query['p95_ms']} | {query['queries_per_s'] / base['query']['queries_per_s']:.2f}× |"
        )
    for shape in result["shapes"]:
        if limited := shape["rate_limit"]:
            rows.append(
                f"\nRate limit, {shape['replicas']} apis, one key, {limited['requests']} requests alternated, burst "
                f"{limited['burst']}: allowed {limited['redis']['allowed']} with the buckets in Redis, "
                f"{limited['memory']['allowed']} with a bucket per process."
            )
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", type=int, nargs="+", default=[1, 2], help="replicas of api and worker")
    parser.add_argument("--documents", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=25)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--query-seconds", type=float, default=30)
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--label", default="", help="results file suffix (scale-out-LABEL)")
    args = parser.parse_args()
    corpus = list(read_jsonl(DATA / "scifact" / "corpus.jsonl"))[: args.documents]
    queries = [q["text"] for q in read_jsonl(DATA / "scifact" / "queries.jsonl")][:300]
    shapes = [measure(replicas, args, corpus, queries) for replicas in args.shapes]
    result = {"args": vars(args), "load_average_at_end": os.getloadavg(), "shapes": shapes}
    name = f"scale-out-{args.label}" if args.label else "scale-out"
    save_result(name, result, markdown(result))


if __name__ == "__main__":
    main()
