"""ragkb's public API over httpx: problem details become `ApiError`, 429 waits `Retry-After` and tries again."""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from ragkb_cli import __version__

Json = dict[str, Any]
# A key past its bucket waits and tries again; a server that keeps answering 429 is an error in the end.
MAX_RATE_LIMITED_TRIES = 10
DEFAULT_RETRY_AFTER_S = 1.0
TERMINAL_JOB_STATUSES = frozenset({"succeeded", "failed", "cancelled"})
# A job's or a document's statuses that no longer change by themselves.
ENDED_STATUSES = TERMINAL_JOB_STATUSES | {"done"}


class ApiError(Exception):
    """An answer that is not a success (RFC 9457 problem details), or a server that cannot be reached."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(f"{title}: {detail}")
        self.status = status
        self.title = title
        self.detail = detail


def error_from(response: httpx.Response) -> ApiError:
    """The problem details a failed response carries; a readable stand-in when it carries none."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "title" in body:
        return ApiError(response.status_code, str(body["title"]), str(body.get("detail", "")))
    text = " ".join(response.text.split())[:200] or response.reason_phrase
    return ApiError(response.status_code, f"HTTP {response.status_code}", text)


def retry_after_s(response: httpx.Response, now: datetime | None = None) -> float:
    """`Retry-After` as seconds: delta-seconds or an HTTP date (RFC 9110); one second when absent or unreadable."""
    value = response.headers.get("retry-after", "").strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return DEFAULT_RETRY_AFTER_S
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def parse_sse(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """Server-sent events as (event, data) pairs; comments (keep-alives) and ids are skipped."""
    event, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", list[str]()
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    if data:
        yield event, "\n".join(data)


def wait_until_ended(
    read: Callable[[], Json],
    timeout_s: float,
    poll_interval_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Json:
    """Read a job or a document until it has ended (a job succeeded, failed or was cancelled; a document is
    done or failed), or as it stands when `timeout_s` runs out: its status says which. The one wait loop the
    CLI, the benchmarks and the end-to-end tests share."""
    deadline = time.monotonic() + timeout_s
    while True:
        current = read()
        if current.get("status") in ENDED_STATUSES or time.monotonic() >= deadline:
            return current
        sleep(poll_interval_s)


class ApiClient:
    """One method per API call the CLI makes; every call raises `ApiError` rather than answer an error."""

    def __init__(
        self,
        url: str,
        key: str | None,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        timeout_s: float = 60.0,
    ) -> None:
        headers = {"User-Agent": f"ragkb-cli/{__version__}"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.url = url.rstrip("/")
        self._sleep = sleep
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- knowledge bases and search ----------------------------------------------------------------

    def list_kbs(self) -> list[Json]:
        body: list[Json] = self._call(lambda: self._http.get("/v1/knowledge-bases")).json()
        return body

    def create_kb(self, name: str) -> Json:
        return self._json(lambda: self._http.post("/v1/knowledge-bases", json={"name": name}))

    def resolve_kb(self, name_or_id: str) -> Json:
        """The KB with this id, or else the one with this name (a name that two KBs share is refused)."""
        kbs = self.list_kbs()
        by_id = [kb for kb in kbs if kb["id"] == name_or_id]
        by_name = [kb for kb in kbs if kb["name"] == name_or_id]
        if by_id:
            return by_id[0]
        if len(by_name) > 1:
            ids = ", ".join(str(kb["id"]) for kb in by_name)
            raise ApiError(0, "Ambiguous knowledge base", f"{len(by_name)} are named {name_or_id!r}: use an id ({ids})")
        if not by_name:
            raise ApiError(404, "Not found", f"no knowledge base named {name_or_id!r} (or with that id)")
        return by_name[0]

    def delete_kb(self, kb_id: str) -> Json:
        """Start deleting a KB (or resume an unfinished deletion); answers the `kb_delete` job."""
        return self._json(lambda: self._http.delete(f"/v1/knowledge-bases/{kb_id}"))

    def check_kb(self, kb_id: str) -> Json:
        """The KB's consistency report: does its index hold what its documents say."""
        return self._json(lambda: self._http.get(f"/v1/knowledge-bases/{kb_id}/consistency"))

    def repair_kb(self, kb_id: str) -> Json:
        """Re-queue what the index lacks, delete orphan points; answers before, actions and after."""
        return self._json(lambda: self._http.post(f"/v1/knowledge-bases/{kb_id}/consistency/repair"))

    def backup_kb(self, kb_id: str, target: Path, timeout_s: float) -> str:
        """Download the KB's backup archive into `target` (written whole or not at all); returns the server's
        file name for it."""
        partial = target.with_name(target.name + ".part")
        request = self._http.build_request("POST", f"/v1/knowledge-bases/{kb_id}/backup", timeout=timeout_s)
        response = self._reach(lambda: self._http.send(request, stream=True))
        try:
            if response.is_error:
                response.read()
                raise error_from(response)
            with partial.open("wb") as handle:
                for block in response.iter_bytes():
                    handle.write(block)
        finally:
            response.close()
        partial.replace(target)
        disposition = response.headers.get("content-disposition", "")
        return disposition.partition("filename=")[2].strip('"') or target.name

    def restore_kb(self, archive: Path, name: str | None, timeout_s: float) -> Json:
        """Restore a backup archive as a new KB (named `name`, else as it was)."""

        def attempt() -> httpx.Response:
            with archive.open("rb") as handle:
                return self._http.post(
                    "/v1/knowledge-bases/restore",
                    files={"file": (archive.name, handle, "application/gzip")},
                    data={"name": name} if name else {},
                    timeout=timeout_s,
                )

        return self._json(attempt)

    def search(self, query: str, kb_ids: list[str], mode: str | None = None, top_k: int | None = None) -> Json:
        body: Json = {"query": query, "knowledge_base_ids": kb_ids}
        if mode:
            body["mode"] = mode
        if top_k is not None:
            body["top_k"] = top_k
        return self._json(lambda: self._http.post("/v1/search", json=body))

    # -- evaluation ----------------------------------------------------------------------------------

    def upload_texts(self, kb_id: str, documents: list[Json]) -> Json:
        """Upload text documents in one batch request; the answer has a result (document or error) per item."""
        body = {"documents": documents}
        return self._json(lambda: self._http.post(f"/v1/knowledge-bases/{kb_id}/documents/batch", json=body))

    def create_question_set(self, kb_id: str, name: str, queries_jsonl: bytes, qrels_tsv: bytes) -> Json:
        """Upload a BEIR folder's queries.jsonl and qrels tsv as a question set of the KB."""
        files = {"queries": ("queries.jsonl", queries_jsonl), "qrels": ("qrels.tsv", qrels_tsv)}
        path = f"/v1/knowledge-bases/{kb_id}/question-sets"
        return self._json(lambda: self._http.post(path, files=files, data={"name": name}))

    def list_question_sets(self, kb_id: str) -> list[Json]:
        body: list[Json] = self._call(lambda: self._http.get(f"/v1/knowledge-bases/{kb_id}/question-sets")).json()
        return body

    def resolve_question_set(self, kb_id: str, name_or_id: str) -> Json:
        sets = self.list_question_sets(kb_id)
        found = [s for s in sets if s["id"] == name_or_id] or [s for s in sets if s["name"] == name_or_id]
        if not found:
            raise ApiError(404, "Not found", f"no question set named {name_or_id!r} (or with that id) in this KB")
        return found[0]

    def evaluate(self, kb_id: str, body: Json, timeout_s: float) -> Json:
        """Run an evaluation; it answers when every query has been searched (minutes for large sets)."""
        path = f"/v1/knowledge-bases/{kb_id}/evaluations"
        return self._json(lambda: self._http.post(path, json=body, timeout=timeout_s))

    # -- tuning --------------------------------------------------------------------------------------

    def start_tune(self, kb_id: str, body: Json) -> Json:
        """Start a tune job; answers the job (202)."""
        return self._json(lambda: self._http.post(f"/v1/knowledge-bases/{kb_id}/tune", json=body))

    def tune_result(self, kb_id: str, job_id: str) -> Json:
        """The tune job and, once it succeeded, its result."""
        return self._json(lambda: self._http.get(f"/v1/knowledge-bases/{kb_id}/tune/{job_id}"))

    def apply_tune(self, kb_id: str, job_id: str) -> Json:
        """The tune's recommendation as the KB's next settings version; answers that version."""
        return self._json(lambda: self._http.post(f"/v1/knowledge-bases/{kb_id}/tune/{job_id}/apply"))

    # -- sync ----------------------------------------------------------------------------------------

    def sync(self, kb_id: str, files: list[Json], dry_run: bool) -> Json:
        body = {"files": files, "dry_run": dry_run}
        return self._json(lambda: self._http.post(f"/v1/knowledge-bases/{kb_id}/sync", json=body))

    def upload(self, kb_id: str, path: Path, source_id: str) -> Json:
        """Upload one file. The file is opened again for every try: an unreadable file raises `OSError`."""

        def attempt() -> httpx.Response:
            with path.open("rb") as handle:
                return self._http.post(
                    f"/v1/knowledge-bases/{kb_id}/documents",
                    files={"file": (path.name, handle)},
                    data={"source_id": source_id},
                )

        return self._json(attempt)

    def job(self, job_id: str) -> Json:
        return self._json(lambda: self._http.get(f"/v1/jobs/{job_id}"))

    def wait_job(self, job_id: str, timeout_s: float, poll_interval_s: float = 1.0) -> Json:
        """The job once it has ended, or as it stands when `timeout_s` runs out (its status says which)."""
        return wait_until_ended(lambda: self.job(job_id), timeout_s, poll_interval_s, self._sleep)

    def job_events(self, job_id: str) -> Iterator[tuple[str, Json]]:
        """The job's event stream as (event, data); raises `ApiError` or `httpx.HTTPError` when it breaks."""
        headers = {"Accept": "text/event-stream"}
        with self._http.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers) as response:
            if response.is_error:
                response.read()
                raise error_from(response)
            for event, data in parse_sse(response.iter_lines()):
                payload = json.loads(data) if data.strip() else {}
                yield event, payload if isinstance(payload, dict) else {"data": payload}

    # -- plumbing ------------------------------------------------------------------------------------

    def _json(self, attempt: Callable[[], httpx.Response]) -> Json:
        body: Json = self._call(attempt).json()
        return body

    def _call(self, attempt: Callable[[], httpx.Response]) -> httpx.Response:
        for _ in range(MAX_RATE_LIMITED_TRIES - 1):
            response = self._reach(attempt)
            if response.status_code != 429:
                break
            self._sleep(retry_after_s(response))
        else:
            response = self._reach(attempt)
        if response.is_error:
            raise error_from(response)
        return response

    def _reach(self, attempt: Callable[[], httpx.Response]) -> httpx.Response:
        try:
            return attempt()
        except httpx.TransportError as exc:
            raise ApiError(0, f"cannot reach {self.url}", str(exc) or type(exc).__name__) from exc
