"""Helpers shared by the benchmark scripts: BEIR loading, the HTTP client, results files."""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

from ragkb_cli.api import wait_until_ended

REPO = Path(__file__).resolve().parents[1]
# The shared data folder beside the checkout; a git worktree one level deeper (…/wt/NAME) finds it one up, and
# RAGKB_BENCH_DATA names any other.
DATA = Path(
    os.environ.get("RAGKB_BENCH_DATA")
    or next(
        (p for p in (REPO.parent / "shared" / "data", REPO.parents[1] / "shared" / "data") if p.exists()),
        REPO.parent / "shared" / "data",
    )
)
RESULTS = REPO / "bench" / "results"
# The retriever's query-vector cache: a latency bench that asks the same questions in every mode turns it off on its
# private stack (0), or every mode after the first would measure a cached vector, not an embedding.
QUERY_CACHE_ENV = "RAGKB_RETRIEVER__QUERY_CACHE_SIZE"


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8") as handle:
        next(handle)
        for line in handle:
            query_id, corpus_id, score = line.rstrip("\n").split("\t")
            qrels.setdefault(query_id, {})[corpus_id] = int(score)
    return qrels


class RetryAfterTransport(httpx.BaseTransport):
    """Waits out a 429 for as long as its Retry-After says and sends again, as a well-behaved client does
    (a bulk load runs into the per-key rate limit; waiting is part of the measured time)."""

    def __init__(self, inner: httpx.BaseTransport, max_waits: int = 1000) -> None:
        self._inner = inner
        self._max_waits = max_waits

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(self._max_waits):
            response = self._inner.handle_request(request)
            if response.status_code != 429:
                return response
            response.read()
            time.sleep(float(response.headers.get("Retry-After", "1")))
        return response

    def close(self) -> None:
        self._inner.close()


def client(url: str) -> httpx.Client:
    """A client that sends the API key from RAGKB_API_KEY, or the admin key `make run` wrote to var/admin.key."""
    return httpx.Client(
        base_url=url,
        timeout=120,
        headers={"Authorization": f"Bearer {api_key()}"},
        transport=RetryAfterTransport(httpx.HTTPTransport()),
    )


def api_key() -> str:
    if key := os.environ.get("RAGKB_API_KEY"):
        return key
    key_file = Path("var") / "admin.key"
    if key_file.exists():
        return key_file.read_text().strip()
    raise SystemExit("set RAGKB_API_KEY (or run from the folder where `make run` wrote var/admin.key)")


def find_kb(http: httpx.Client, name: str) -> dict[str, Any] | None:
    return next((kb for kb in http.get("/v1/knowledge-bases").json() if kb["name"] == name), None)


def warm_up(
    http: httpx.Client, knowledge_bases: int = 4, *, chunking: dict[str, Any] | None = None, prefix: str = "warm-up"
) -> list[str]:
    """One short document in each of a few new KBs (`chunking`: their settings, e.g. a passage precision),
    uploaded back to back, before a timed upload, so that every task process has loaded its model (each loads it,
    per precision, on its first task), as a long-lived worker's have. One KB's documents would be one queue
    message, one batch, one process: a batch takes companions from its own KB only. Returns the KBs' ids."""
    kb_ids = []
    for n in range(knowledge_bases):
        kb = http.post(
            "/v1/knowledge-bases", json={"name": f"{prefix}-{n}"} | ({"chunking": chunking} if chunking else {})
        )
        kb.raise_for_status()
        kb_ids.append(kb.json()["id"])
    note = [{"source_id": "warm-up.md", "text": "A warm-up note about the cafeteria."}]
    for kb_id in kb_ids:
        http.post(f"/v1/knowledge-bases/{kb_id}/documents/batch", json={"documents": note}).raise_for_status()
    for kb_id in kb_ids:
        while http.get(f"/v1/knowledge-bases/{kb_id}").json()["document_counts"]["done"] < len(note):
            time.sleep(0.2)
    return kb_ids


def ragkb_ingest_runs(system: dict[str, Any]) -> list[dict[str, Any]]:
    """ragkb's ingest figures in a bench/peers.py result: one per passage precision measured in the run, or, in a
    result from before 2026-12-06 evening, bench/ingest.py's file (one object, float32 then the default)."""
    ingest = system.get("ingest")
    if isinstance(ingest, list):
        return ingest
    if isinstance(ingest, dict):
        return [{"passage_precision": "float32 (bench/ingest.py's file)"} | ingest]
    return []


def wait_job(http: Any, job_id: str, timeout_s: float, poll_s: float = 2) -> dict[str, Any]:
    job = wait_until_ended(lambda: http.get(f"/v1/jobs/{job_id}").json(), timeout_s, poll_s)
    if job["status"] in ("queued", "running"):
        raise SystemExit(f"job {job_id} did not finish within {timeout_s} s")
    return job


def delete_kb(http: Any, kb_id: str, timeout_s: float = 3600) -> None:
    """Delete a KB and wait for its deletion job: until it is gone its name is taken (a new KB of the same
    name is refused)."""
    response = http.delete(f"/v1/knowledge-bases/{kb_id}")
    response.raise_for_status()
    job = wait_job(http, response.json()["id"], timeout_s, poll_s=0.5)
    if job["status"] != "succeeded":
        raise SystemExit(f"could not delete knowledge base {kb_id}: {job['errors']}")


def ndcg_at_k(ranked: list[str], relevant: dict[str, int], k: int = 10) -> float:
    gains = [relevant.get(doc, 0) for doc in ranked[:k]]
    dcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(gains))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


def settings_of(pairs: Iterable[str]) -> dict[str, str]:
    """KEY=VALUE arguments (a bench's --env, an arm's own settings) as environment overrides of a stack."""
    given = [pair for pair in pairs if pair]
    if bad := [pair for pair in given if "=" not in pair]:
        raise SystemExit(f"not KEY=VALUE: {bad}")
    return dict(pair.split("=", 1) for pair in given)


def split_arm(arm: str) -> tuple[str, dict[str, str]]:
    """`NAME` or `NAME:KEY=VALUE,KEY=VALUE`: an arm's name and its own settings."""
    name, _, settings = arm.partition(":")
    return name, settings_of(settings.split(","))


def save_result(name: str, result: dict[str, Any], table: str | None = None) -> Path:
    """bench/results/NAME.json, and NAME.md when there is a markdown `table` (also printed)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    result = {"machine": f"{platform.machine()} {platform.node()}", "at": time.strftime("%Y-%m-%dT%H:%M:%S"), **result}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, ensure_ascii=False))
    if table is None:
        print(f"saved {path}")
        return path
    markdown = RESULTS / f"{name}.md"
    markdown.write_text(table.rstrip("\n") + "\n", encoding="utf-8")
    print(f"{table.rstrip()}\nsaved {path} and {markdown}")
    return path
