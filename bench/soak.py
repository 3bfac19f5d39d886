"""Load soak (`make soak`): 8 Locust clients for 10 minutes of mixed traffic on a private stack, across 5 KBs.

Each client searches (80 %), uploads a short text document (15 %) or deletes one it uploaded (5 %), with 0.2 to
1 s between requests. Reported: throughput, p50/p99 latency per operation, errors (any answer other than a
success: a 503 counts as one), the resident memory of each service (summed over its processes) at the start,
after the warm-up and at the end, and the consistency check of every KB once the last uploads are ingested.

    .venv/bin/python bench/soak.py [--users 8] [--minutes 10] [--kbs 5] [--warmup-minutes 2]

The stack is `deploy/launcher.py` with a redis-server of its own, on a temporary folder, as `make run` starts it.
"""

# isort: off
# Locust patches the standard library for gevent when it is imported: before anything opens a socket.
from locust import HttpUser, between, events, task
from locust.env import Environment

# isort: on

import argparse
import itertools
import random
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
import httpx
from common import REPO, save_result
from processes import ROLES, read_memory, stack_processes

from ragkb_cli.api import wait_until_ended
from ragkb_cli.stack import private_stack

SEED_DOCUMENTS_PER_KB = 30
TOPICS = ["tides", "orchards", "glaciers", "lighthouses", "bakeries", "observatories", "vineyards", "libraries"]
QUERIES = [f"what happens to the {topic} in winter" for topic in TOPICS] + [
    f"who looks after the {topic}" for topic in TOPICS
]
SAMPLE_EVERY_S = 15.0


def document_text(number: int) -> str:
    topic = TOPICS[number % len(TOPICS)]
    return (
        f"# Note {number} on {topic}\n\nIn winter the {topic} of district {number % 17} are looked after by a team "
        f"of {number % 5 + 2} people, who keep a logbook and report to the regional office every {number % 7 + 1} "
        f"weeks.\n"
    )


@dataclass
class Shared:
    """What the clients share: the KBs, the documents they uploaded (to delete), a numbering of uploads."""

    kb_ids: list[str] = field(default_factory=list)
    uploaded: list[tuple[str, str]] = field(default_factory=list)
    numbers: "itertools.count[int]" = field(default_factory=lambda: itertools.count(1_000_000))
    lock: threading.Lock = field(default_factory=threading.Lock)


SHARED = Shared()


class SoakClient(HttpUser):
    wait_time = between(0.2, 1.0)
    admin_key = ""

    def on_start(self) -> None:
        self.client.headers["Authorization"] = f"Bearer {self.admin_key}"

    @task(80)
    def search(self) -> None:
        body = {"query": random.choice(QUERIES), "knowledge_base_ids": [random.choice(SHARED.kb_ids)], "top_k": 5}
        self._judged(self.client.post("/v1/search", json=body, name="search", catch_response=True))

    @task(15)
    def upload(self) -> None:
        kb_id, number = random.choice(SHARED.kb_ids), next(SHARED.numbers)
        body = {"text": document_text(number), "source_id": f"soak/{number}.md"}
        path = f"/v1/knowledge-bases/{kb_id}/documents"
        with self.client.post(path, json=body, name="upload", catch_response=True) as response:
            if response.status_code == 202:
                with SHARED.lock:
                    SHARED.uploaded.append((kb_id, str(response.json()["id"])))
            self._judge(response)

    @task(5)
    def delete(self) -> None:
        with SHARED.lock:
            if not SHARED.uploaded:
                return
            kb_id, document_id = SHARED.uploaded.pop(random.randrange(len(SHARED.uploaded)))
        path = f"/v1/knowledge-bases/{kb_id}/documents/{document_id}"
        self._judged(self.client.delete(path, name="delete", catch_response=True))

    def _judged(self, response: Any) -> None:
        with response:
            self._judge(response)

    @staticmethod
    def _judge(response: Any) -> None:
        """Any answer but a success is an error, reported with its status and problem detail."""
        if not response.ok:
            response.failure(f"{response.status_code}: {response.text[:300]}")
        else:
            response.success()


# -- memory ---------------------------------------------------------------------------------------------


@dataclass
class MemoryTrace:
    """Resident memory per service (its processes summed: the worker's task processes included), sampled."""

    api_port: int
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def sample(self, at_s: float) -> None:
        by_role = dict.fromkeys(ROLES, 0.0)
        for pid, role in stack_processes(self.api_port).items():
            if (memory := read_memory(pid)) is not None:
                by_role[role] += memory.rss_mb
        self.samples.append((at_s, by_role))

    def summary(self, warmup_s: float) -> dict[str, dict[str, float]]:
        start = self.samples[0][1]
        warm = next((sample for at, sample in self.samples if at >= warmup_s), self.samples[-1][1])
        end = self.samples[-1][1]
        return {
            role.removeprefix("ragkb_"): {
                "rss_mb_start": round(start[role], 1),
                "rss_mb_after_warmup": round(warm[role], 1),
                "rss_mb_end": round(end[role], 1),
                "growth_after_warmup_mb": round(end[role] - warm[role], 1),
                "growth_after_warmup_pct": round(100 * (end[role] - warm[role]) / warm[role], 1) if warm[role] else 0.0,
            }
            for role in ROLES
        }


# -- the run --------------------------------------------------------------------------------------------


def seed(http: httpx.Client, kbs: int) -> list[str]:
    kb_ids = []
    for index in range(kbs):
        kb_id = str(http.post("/v1/knowledge-bases", json={"name": f"soak-{index}"}).raise_for_status().json()["id"])
        numbers = range(index * SEED_DOCUMENTS_PER_KB, (index + 1) * SEED_DOCUMENTS_PER_KB)
        documents = [{"text": document_text(n), "source_id": f"seed/{n}.md"} for n in numbers]
        for start in range(0, len(documents), 5):
            batch = {"documents": documents[start : start + 5]}
            http.post(f"/v1/knowledge-bases/{kb_id}/documents/batch", json=batch).raise_for_status()
        kb_ids.append(kb_id)
    for kb_id in kb_ids:
        wait_settled(http, kb_id, timeout_s=900)
    return kb_ids


def wait_settled(http: httpx.Client, kb_id: str, timeout_s: float) -> dict[str, Any]:
    """The KB once no document of it is pending or processing (or as it stands at the timeout)."""

    def read() -> dict[str, Any]:
        kb: dict[str, Any] = http.get(f"/v1/knowledge-bases/{kb_id}").json()
        counts = kb["document_counts"]
        return {**kb, "status": "done" if counts["pending"] + counts["processing"] == 0 else "busy"}

    return wait_until_ended(read, timeout_s, 2.0)


def run_load(api_url: str, admin_key: str, users: int, duration_s: float, memory: MemoryTrace) -> Environment:
    SoakClient.host = api_url
    SoakClient.admin_key = admin_key
    environment = Environment(user_classes=[SoakClient], events=events)
    runner = environment.create_local_runner()
    started = time.monotonic()

    def sample_memory() -> None:
        while True:
            memory.sample(time.monotonic() - started)
            gevent.sleep(SAMPLE_EVERY_S)

    sampler = gevent.spawn(sample_memory)
    runner.start(users, spawn_rate=users)
    gevent.spawn_later(duration_s, runner.quit)
    runner.greenlet.join()
    sampler.kill()
    memory.sample(time.monotonic() - started)
    return environment


def operation_figures(environment: Environment, duration_s: float) -> dict[str, dict[str, float]]:
    figures = {}
    for name in ("search", "upload", "delete"):
        entry = next((e for (n, _), e in environment.stats.entries.items() if n == name), None)
        if entry is None or entry.num_requests == 0:
            continue
        figures[name] = {
            "requests": entry.num_requests,
            "per_s": round(entry.num_requests / duration_s, 2),
            "p50_ms": entry.get_response_time_percentile(0.5),
            "p99_ms": entry.get_response_time_percentile(0.99),
            "errors": entry.num_failures,
        }
    return figures


def consistency(http: httpx.Client, kb_ids: list[str]) -> dict[str, Any]:
    reports = {kb_id: http.get(f"/v1/knowledge-bases/{kb_id}/consistency").json() for kb_id in kb_ids}
    return {
        "consistent": all(report["consistent"] for report in reports.values()),
        "documents": sum(report["documents"] for report in reports.values()),
        "points": sum(report["points"] for report in reports.values()),
        "findings": [finding for report in reports.values() for finding in report["findings"]][:20],
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        f"Soak: {result['users']} clients × {result['minutes']} min, {result['kbs']} KBs "
        f"({result['total_requests']} requests, {result['throughput_per_s']} /s, {result['errors']} errors)",
        "",
        "| operation | requests | per s | p50 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in result["operations"].items():
        lines.append(
            f"| {name} | {row['requests']} | {row['per_s']} | {row['p50_ms']} | {row['p99_ms']} | {row['errors']} |"
        )
    lines += [
        "",
        "| service | RSS start MB | after warm-up MB | end MB | growth after warm-up |",
        "|---|---|---|---|---|",
    ]
    for role, row in result["memory"].items():
        lines.append(
            f"| {role} | {row['rss_mb_start']} | {row['rss_mb_after_warmup']} | {row['rss_mb_end']} | "
            f"{row['growth_after_warmup_mb']} MB ({row['growth_after_warmup_pct']} %) |"
        )
    check = result["consistency"]
    lines += ["", f"Consistency at the end: {'clean' if check['consistent'] else check['findings']} "
              f"({check['documents']} documents, {check['points']} points)"]  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--kbs", type=int, default=5)
    parser.add_argument("--warmup-minutes", type=float, default=2.0)
    args = parser.parse_args()
    duration_s = args.minutes * 60
    with tempfile.TemporaryDirectory(prefix="ragkb-soak-") as folder, private_stack(REPO, Path(folder)) as stack:
        http = httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.admin_key}"}, timeout=120)
        SHARED.kb_ids = seed(http, args.kbs)
        memory = MemoryTrace(int(stack.env["RAGKB_API__PORT"]))
        environment = run_load(stack.api_url, stack.admin_key, args.users, duration_s, memory)
        settled = [wait_settled(http, kb_id, timeout_s=900)["status"] for kb_id in SHARED.kb_ids]
        operations = operation_figures(environment, duration_s)
        total = sum(row["requests"] for row in operations.values())
        result = {
            "users": args.users,
            "minutes": args.minutes,
            "kbs": args.kbs,
            "total_requests": total,
            "throughput_per_s": round(total / duration_s, 2),
            "errors": sum(row["errors"] for row in operations.values()),
            "error_kinds": {
                f"{error.method} {error.name}: {error.error}": error.occurrences
                for error in environment.stats.errors.values()
            },
            "operations": operations,
            "memory": memory.summary(args.warmup_minutes * 60),
            "memory_samples": memory.samples,
            "settled": all(status == "done" for status in settled),
            "consistency": consistency(http, SHARED.kb_ids),
        }
        http.close()
    save_result("soak", result, table(result))


if __name__ == "__main__":
    main()
