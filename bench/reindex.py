"""Re-index a live KB while a client searches it in a loop; then roll back. Counts every failed or empty answer.

    python bench/reindex.py [--kb-name bench-scifact-5183] [--chunking '{"target_tokens": 128, "max_tokens": 200}']
                            [--no-rollback] [--url http://127.0.0.1:8000]

The KB keeps serving its current generation while the new one is built from the stored originals; the loop
records HTTP status, emptiness and latency of every answer before, during and after the switch, and which
settings the answers came from (the KB's `chunking` as reported). Rollback is measured the same way.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from common import DATA, client, find_kb, percentile, read_jsonl, save_result, wait_job

QUERY_CORPUS = "scifact"


@dataclass
class Loop:
    """Searches in a thread until stopped; keeps every failure and every answer's latency."""

    url: str
    kb_id: str
    queries: list[str]
    answers: int = 0
    failures: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        http = client(self.url)
        n = 0
        while not self.stop.is_set():
            body = {"query": self.queries[n % len(self.queries)], "knowledge_base_ids": [self.kb_id], "top_k": 10}
            n += 1
            started = time.perf_counter()
            try:
                response = http.post("/v1/search", json=body)
            except Exception as exc:  # every failure is what this loop records
                self.failures.append(repr(exc))
                continue
            self.latencies_ms.append((time.perf_counter() - started) * 1000)
            self.answers += 1
            if response.status_code != 200:
                self.failures.append(f"{response.status_code}: {response.text[:200]}")
            elif not response.json()["results"]:
                self.failures.append(f"empty answer to {body['query']!r}")


def summary(loop: Loop) -> dict[str, Any]:
    lat = loop.latencies_ms or [0.0]
    return {
        "answers": loop.answers,
        "failures": len(loop.failures),
        "first_failures": loop.failures[:5],
        "p50_ms": round(percentile(lat, 50), 1),
        "p95_ms": round(percentile(lat, 95), 1),
        "max_ms": round(max(lat), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--kb-name", default="bench-scifact-5183")
    parser.add_argument("--chunking", type=json.loads, default={"target_tokens": 128, "max_tokens": 200})
    parser.add_argument("--no-rollback", action="store_true")
    parser.add_argument("--timeout", type=float, default=7200)
    args = parser.parse_args()
    http = client(args.url)
    kb = find_kb(http, args.kb_name)
    if kb is None:
        raise SystemExit(f"no KB {args.kb_name}: run bench/ingest.py first")
    queries = [q["text"] for q in read_jsonl(DATA / QUERY_CORPUS / "queries.jsonl")][:500]
    chunking_before = kb["chunking"]
    loop = Loop(args.url, kb["id"], queries)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    started = time.perf_counter()
    response = http.post(f"/v1/knowledge-bases/{kb['id']}/reindex", json={"chunking": chunking_before | args.chunking})
    response.raise_for_status()
    job = wait_job(http, response.json()["id"], args.timeout)
    reindex_s = time.perf_counter() - started
    chunking_after = http.get(f"/v1/knowledge-bases/{kb['id']}").json()["chunking"]
    rollback: dict[str, Any] = {}
    if not args.no_rollback:
        rolled = http.post(f"/v1/knowledge-bases/{kb['id']}/rollback")
        rollback = {"status": rolled.status_code, "chunking": rolled.json().get("chunking")}
        time.sleep(5)  # the loop keeps searching across the switch back
    loop.stop.set()
    thread.join(timeout=30)
    result = {
        "kb": args.kb_name,
        "documents": sum(kb["document_counts"].values()),
        "job": {key: job[key] for key in ("status", "progress", "counts", "errors")},
        "reindex_seconds": round(reindex_s, 1),
        "chunking_before": chunking_before,
        "chunking_after_switch": chunking_after,
        "rollback": rollback,
        "search_loop": summary(loop),
    }
    path = save_result(f"reindex-{args.kb_name}", result)
    print(json.dumps(result, indent=2, ensure_ascii=False))
    print(f"saved {path}")


if __name__ == "__main__":
    main()
