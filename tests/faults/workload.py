"""The load a fault lands in: uploads and searches running side by side, each answer judged as it comes.

An upload must be accepted (202) or refused for the moment with 503 and Retry-After; a search must answer the
oracle document first (200) or 503 with Retry-After. Anything else (a 500, a wrong answer, a 503 without
Retry-After) is a violation. A refused connection is counted apart: it is what a caller sees while the api
process itself is down (nothing is listening to answer 503), and only the api fault allows it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

# Documents the searches know the answer for: query → source_id of the passage that must come first.
ORACLE = {
    "oracle/lighthouse.md": (
        "# Lighthouse keeper\n\nThe lighthouse keeper climbs two hundred and fourteen spiral steps to polish the "
        "brass lens every evening before sunset.\n",
        "how many steps does the lighthouse keeper climb to polish the lens",
    ),
    "oracle/bakery.md": (
        "# Village bakery\n\nThe village bakery sells dark rye bread on Tuesdays and almond croissants on Sundays.\n",
        "which day are almond croissants sold at the bakery",
    ),
    "oracle/greenhouse.md": (
        "# Greenhouse\n\nTomato seedlings in the greenhouse are watered at dawn with collected rainwater.\n",
        "when are the tomato seedlings in the greenhouse watered",
    ),
}
TOPICS = ["cooling", "power", "network", "storage", "access", "monitoring"]


def bulk_document(number: int, paragraphs: int = 24) -> str:
    """A document of several chunks, in a vocabulary none of the oracle queries share."""
    body = [
        f"Section {n}: the {TOPICS[(number + n) % len(TOPICS)]} procedure {number}-{n} requires a checklist, two "
        f"operators and an entry in the operations journal; escalate after {n % 9 + 1} failed tries."
        for n in range(paragraphs)
    ]
    return f"# Procedure {number}\n\n" + "\n\n".join(body)


@dataclass
class Tally:
    """What the callers saw: counts per outcome, and every violation with what was answered."""

    outcomes: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, outcome: str) -> None:
        with self.lock:
            self.outcomes[outcome] += 1

    def violation(self, what: str) -> None:
        with self.lock:
            self.violations.append(what)
            self.outcomes["violation"] += 1


class Workload:
    """Uploads (one every `upload_interval_s`) and searches (back to back) on a KB until `stop()`."""

    def __init__(self, api_url: str, admin_key: str, kb_id: str, *, first_number: int, upload_interval_s: float = 0.4):
        headers = {"Authorization": f"Bearer {admin_key}"}
        self._uploads = httpx.Client(base_url=api_url, headers=headers, timeout=60)
        self._searches = httpx.Client(base_url=api_url, headers=headers, timeout=60)
        self._kb_id = kb_id
        self._number = first_number
        self._interval = upload_interval_s
        self._stopping = threading.Event()
        self._threads = [threading.Thread(target=self._upload_loop, daemon=True),
                         threading.Thread(target=self._search_loop, daemon=True)]  # fmt: skip
        self.tally = Tally()

    def start(self) -> Workload:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> Tally:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=120)
        self._uploads.close()
        self._searches.close()
        return self.tally

    @property
    def next_number(self) -> int:
        return self._number

    def _upload_loop(self) -> None:
        while not self._stopping.is_set():
            body = {"text": bulk_document(self._number), "source_id": f"bulk/{self._number:05d}.md"}
            answered = self._send(self._uploads, "POST", f"/v1/knowledge-bases/{self._kb_id}/documents", body)
            if answered is not None and answered.status_code == 202:
                self.tally.accepted.append(str(answered.json()["id"]))
                self._number += 1
                self.tally.count("upload accepted")
            self._stopping.wait(self._interval)

    def _search_loop(self) -> None:
        while not self._stopping.is_set():
            for source_id, (_, query) in ORACLE.items():
                body = {"query": query, "knowledge_base_ids": [self._kb_id], "top_k": 3}
                answered = self._send(self._searches, "POST", "/v1/search", body)
                if answered is not None and answered.status_code == 200:
                    self._judge(answered.json(), source_id, query)
                self._stopping.wait(0.1)

    def _judge(self, answer: dict[str, Any], source_id: str, query: str) -> None:
        results = answer["results"]
        if results and results[0]["source_id"] == source_id:
            self.tally.count("search correct")
        else:
            first = results[0]["source_id"] if results else "nothing"
            self.tally.violation(f"search {query!r} answered {first}, not {source_id}")

    def _send(self, client: httpx.Client, method: str, path: str, body: dict[str, Any]) -> httpx.Response | None:
        """The answer when it is one to judge further (2xx); None after counting anything else."""
        kind = "upload" if "documents" in path else "search"
        try:
            response = client.request(method, path, json=body)
        except httpx.TransportError:
            self.tally.count(f"{kind} connection refused")
            self._stopping.wait(0.5)
            return None
        if response.status_code == 503 and response.headers.get("retry-after"):
            self.tally.count(f"{kind} 503 with Retry-After")
            self._stopping.wait(0.5)
            return None
        if response.is_success:
            return response
        self.tally.violation(f"{kind} answered {response.status_code}: {response.text[:300]}")
        return None


def wait_until(condition: Any, timeout_s: float, what: str, poll_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll_s)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
