"""ragkb CLI commands against a hand-written fake of the public API, served through httpx.MockTransport."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragkb_cli.__main__ import main
from ragkb_cli.api import ApiClient, ApiError, parse_sse, retry_after_s
from ragkb_cli.files import ledger_path, sha256_file
from ragkb_cli.output import deletion_line, plan_lines, search_lines, snippet
from ragkb_cli.progress import no_progress
from ragkb_cli.sync import SyncOptions, SyncRun

KEY = "test-key"
URL = "http://ragkb.test"
BROKEN = b"%PDF-broken"  # content the fake's "worker" fails to ingest


@dataclass
class FakeRagkb:
    """The public API's contract, in memory: KBs, uploads by source id, the sync plan and its job."""

    kbs: dict[str, dict[str, Any]] = field(default_factory=dict)
    documents: dict[str, dict[str, str]] = field(default_factory=dict)  # kb id → source id → sha256
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    uploads: list[str] = field(default_factory=list)
    sync_requests: list[dict[str, Any]] = field(default_factory=list)
    rate_limited: int = 0  # answer this many requests 429 first
    stream_breaks: bool = False
    refuse: dict[str, int] = field(default_factory=dict)  # source id → status of a refused upload

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("authorization") != f"Bearer {KEY}":
            return problem(401, "Unauthorized", "no or unknown API key")
        if self.rate_limited:
            self.rate_limited -= 1
            return problem(429, "Too many requests", "slow down", {"Retry-After": "0"})
        path, method = request.url.path, request.method
        if path == "/v1/knowledge-bases":
            return self.create_kb(request) if method == "POST" else httpx.Response(200, json=list(self.kbs.values()))
        if match := re.fullmatch(r"/v1/knowledge-bases/([^/]+)/(sync|documents)", path):
            kb_id, what = match.groups()
            if kb_id not in self.kbs:
                return problem(404, "Not found", f"knowledge base {kb_id} does not exist or is not yours")
            return self.sync(kb_id, request) if what == "sync" else self.upload(kb_id, request)
        if match := re.fullmatch(r"/v1/jobs/([^/]+)(/events)?", path):
            return self.events(match.group(1)) if match.group(2) else httpx.Response(200, json=self.job(match[1]))
        if path == "/v1/search":
            return self.search(json.loads(request.content))
        return problem(404, "Not found", "Not Found")

    def add_kb(self, name: str, kb_id: str | None = None) -> str:
        kb_id = kb_id or f"kb_{len(self.kbs) + 1}"
        self.kbs[kb_id] = {"id": kb_id, "name": name, "document_counts": {"done": 0, "failed": 0}}
        self.documents[kb_id] = {}
        return kb_id

    def create_kb(self, request: httpx.Request) -> httpx.Response:
        kb_id = self.add_kb(json.loads(request.content)["name"])
        return httpx.Response(201, json=self.kbs[kb_id])

    def sync(self, kb_id: str, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.sync_requests.append(body)
        stored = self.documents[kb_id]
        files = {entry["source_id"]: entry["sha256"] for entry in body["files"]}
        upload = [
            {"source_id": sid, "reason": "new" if sid not in stored else "changed"}
            for sid, sha in files.items()
            if stored.get(sid) != sha
        ]
        delete = [{"source_id": sid, "document_id": f"doc:{sid}"} for sid in stored if sid not in files]
        unchanged = [sid for sid, sha in files.items() if stored.get(sid) == sha]
        job_id = None
        if not body["dry_run"]:
            for entry in delete:
                del stored[entry["source_id"]]
            job_id = f"job_{len(self.jobs) + 1}"
            self.jobs[job_id] = {"kb_id": kb_id, "wanted": [e["source_id"] for e in upload], "deleted": len(delete)}
            self.jobs[job_id]["unchanged"] = len(unchanged)
        plan: dict[str, Any] = {
            "job_id": job_id,
            "upload": upload,
            "unchanged": unchanged,
            "delete": delete,
            "excluded": [],
        }
        plan["counts"] = {"upload": len(upload), "unchanged": len(unchanged), "delete": len(delete), "excluded": 0}
        return httpx.Response(200, json=plan)

    def upload(self, kb_id: str, request: httpx.Request) -> httpx.Response:
        fields = multipart_fields(request)
        source_id, content = fields["source_id"].decode(), fields["file"]
        if source_id in self.refuse:
            return problem(self.refuse[source_id], "Unsupported media type", f"{source_id}: its content is binary")
        self.uploads.append(source_id)
        self.documents[kb_id][source_id] = "broken" if content == BROKEN else hashlib.sha256(content).hexdigest()
        return httpx.Response(202, json={"id": f"doc:{source_id}", "source_id": source_id, "status": "pending"})

    def job(self, job_id: str) -> dict[str, Any]:
        job = self.jobs[job_id]
        stored = self.documents[job["kb_id"]]
        arrived = [sid for sid in job["wanted"] if sid in stored]
        errors = [
            {"source_id": sid, "message": "parse failed: not a PDF"} for sid in arrived if stored[sid] == "broken"
        ]
        counts = {"uploaded": len(arrived) - len(errors), "unchanged": job["unchanged"], "deleted": job["deleted"]}
        counts["failed"] = len(errors)
        status = "succeeded" if len(arrived) == len(job["wanted"]) else "running"  # waits for the rest
        progress = {"current": len(arrived), "total": len(job["wanted"])}
        return {"id": job_id, "status": status, "progress": progress, "counts": counts, "errors": errors}

    def events(self, job_id: str) -> httpx.Response:
        job = self.job(job_id)
        stream = ": keep-alive\n\n"
        stream += f"event: progress\ndata: {json.dumps({**job['progress'], 'action': 'upload'})}\n\n"
        if job["status"] == "succeeded" and not self.stream_breaks:
            stream += f"event: complete\ndata: {json.dumps({'counts': job['counts'], 'errors': job['errors']})}\n\n"
        return httpx.Response(200, content=self.stream(stream, waits=job["status"] != "succeeded"))

    def stream(self, text: str, waits: bool) -> Iterator[bytes]:
        yield text.encode()
        # A job waiting for uploads that will never come stays open: reading on would hang.
        assert not waits or self.stream_breaks, "the CLI kept following a job that only waits for failed uploads"

    def search(self, body: dict[str, Any]) -> httpx.Response:
        result = {"score": 0.5, "title": "Travel policy", "source_id": "travel.md", "text": "Claims\nwithin 30 days"}
        result |= {"page": 3, "heading_path": ["Expenses"]}
        return httpx.Response(200, json={"results": [result], "took_ms": 3, "mode": body.get("mode") or "hybrid"})


def problem(status: int, title: str, detail: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return httpx.Response(status, json=body, headers={"content-type": "application/problem+json", **(headers or {})})


def multipart_fields(request: httpx.Request) -> dict[str, bytes]:
    head = f"Content-Type: {request.headers['content-type']}\r\n\r\n".encode()
    message = message_from_bytes(head + request.read())
    fields = {}
    for part in message.get_payload():
        assert isinstance(part, Message)
        payload = part.get_payload(decode=True)
        assert isinstance(payload, bytes)
        fields[str(part.get_param("name", header="content-disposition"))] = payload
    return fields


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeRagkb:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("RAGKB_URL", URL)
    monkeypatch.setenv("RAGKB_API_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    return FakeRagkb()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "guides").mkdir(parents=True)
    (root / "a.md").write_text("# A\n", encoding="utf-8")
    (root / "guides" / "b.md").write_text("# B\n", encoding="utf-8")
    return root


def cli(fake: FakeRagkb, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv), transport=fake.transport)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- sync -----------------------------------------------------------------------------------------------------


def test_first_sync_uploads_everything_and_prints_one_summary_line(
    fake: FakeRagkb, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.add_kb("handbook")
    code, out, err = cli(fake, capsys, "sync", str(folder), "--kb", "handbook")
    assert (code, out, err) == (0, "uploaded 2, unchanged 0, deleted 0, failed 0\n", "")
    assert sorted(fake.uploads) == ["a.md", "guides/b.md"]
    manifest = fake.sync_requests[0]
    assert manifest["dry_run"] is False
    entry = next(e for e in manifest["files"] if e["source_id"] == "a.md")
    assert entry["sha256"] == sha256_file(folder / "a.md") and entry["size"] == 4
    assert entry["mtime"] == pytest.approx((folder / "a.md").stat().st_mtime)


def test_second_sync_uploads_nothing_and_hashes_nothing(
    fake: FakeRagkb, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kb_id = fake.add_kb("handbook")
    assert cli(fake, capsys, "sync", str(folder), "--kb", kb_id)[0] == 0
    fake.uploads.clear()
    hashed: list[Path] = []

    def counting(path: Path) -> str:
        hashed.append(path)
        return sha256_file(path)

    with ApiClient(URL, KEY, transport=fake.transport) as api:
        options = SyncOptions(hasher=counting)
        ledger = ledger_path(URL, kb_id, folder)
        report = SyncRun(api, kb_id, folder, ledger=ledger, options=options, progress=no_progress).run()
    assert hashed == [] and fake.uploads == []
    assert (report.uploaded, report.unchanged, report.deleted, report.failed) == (0, 2, 0, 0)


def test_edit_add_delete_syncs_exactly_those(fake: FakeRagkb, folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake.add_kb("handbook")
    cli(fake, capsys, "sync", str(folder), "--kb", "handbook")
    fake.uploads.clear()
    (folder / "a.md").write_text("# A, edited\n", encoding="utf-8")
    (folder / "new.md").write_text("# New\n", encoding="utf-8")
    (folder / "guides" / "b.md").unlink()
    code, out, _ = cli(fake, capsys, "sync", str(folder), "--kb", "handbook")
    assert (code, out) == (0, "uploaded 2, unchanged 0, deleted 1, failed 0\n")
    assert sorted(fake.uploads) == ["a.md", "new.md"]


def test_dry_run_prints_the_plan_and_changes_nothing(
    fake: FakeRagkb, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kb_id = fake.add_kb("handbook")
    fake.documents[kb_id] = {"a.md": "0" * 64, "gone.md": "1" * 64}
    code, out, _ = cli(fake, capsys, "sync", str(folder), "--kb", "handbook", "--dry-run")
    assert code == 0
    assert out.splitlines() == [
        "plan: upload 2, unchanged 0, delete 1, excluded 0",
        "upload a.md (changed)",
        "upload guides/b.md (new)",
        "delete gone.md",
    ]
    assert fake.uploads == [] and fake.sync_requests[0]["dry_run"] is True
    assert not ledger_path(URL, kb_id, folder).exists()


def test_plan_lines_list_exclusions() -> None:
    plan: dict[str, Any] = {
        "upload": [],
        "delete": [],
        "excluded": [{"source_id": "x.png", "reason": "unsupported type"}],
    }
    plan["counts"] = {"excluded": 1}
    assert plan_lines(plan)[-1] == "exclude x.png (unsupported type)"


def test_failed_ingest_and_refused_upload_exit_1_and_are_listed(
    fake: FakeRagkb, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.add_kb("handbook")
    (folder / "bad.pdf").write_bytes(BROKEN)
    (folder / "blob.bin").write_bytes(b"\x00\x01")
    fake.refuse["blob.bin"] = 415
    code, out, err = cli(fake, capsys, "sync", str(folder), "--kb", "handbook")
    assert code == 1
    assert out == "uploaded 2, unchanged 0, deleted 0, failed 2\n"
    assert err.splitlines() == [
        "failed bad.pdf: parse failed: not a PDF",
        "failed blob.bin: Unsupported media type: blob.bin: its content is binary",
    ]


def test_a_file_that_vanishes_before_upload_is_a_failure_not_a_crash(
    fake: FakeRagkb, folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.add_kb("handbook")
    real_sync = ApiClient.sync

    def sync_then_delete(self: ApiClient, kb_id: str, files: list[Any], dry_run: bool) -> Any:
        plan = real_sync(self, kb_id, files, dry_run)
        (folder / "a.md").unlink()
        return plan

    monkeypatch.setattr(ApiClient, "sync", sync_then_delete)
    code, out, err = cli(fake, capsys, "sync", str(folder), "--kb", "handbook")
    assert (code, out, err) == (1, "uploaded 1, unchanged 0, deleted 0, failed 1\n", "failed a.md: the file vanished\n")


@pytest.mark.parametrize("stream_breaks", [False, True], ids=["events", "polling"])
def test_a_refused_upload_does_not_wait_for_the_server_to_give_up_on_it(
    fake: FakeRagkb, folder: Path, capsys: pytest.CaptureFixture[str], stream_breaks: bool
) -> None:
    fake.add_kb("handbook")
    fake.stream_breaks = stream_breaks
    (folder / "blob.bin").write_bytes(b"\x00\x01")
    fake.refuse["blob.bin"] = 415
    code, out, err = cli(fake, capsys, "sync", str(folder), "--kb", "handbook")
    assert (code, out) == (1, "uploaded 2, unchanged 0, deleted 0, failed 1\n")
    assert err == "failed blob.bin: Unsupported media type: blob.bin: its content is binary\n"


def test_a_broken_event_stream_falls_back_to_polling_the_job(
    fake: FakeRagkb, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.add_kb("handbook")
    fake.stream_breaks = True
    (folder / "bad.pdf").write_bytes(BROKEN)
    code, out, err = cli(fake, capsys, "sync", str(folder), "--kb", "handbook")
    assert (code, out, err) == (
        1,
        "uploaded 2, unchanged 0, deleted 0, failed 1\n",
        "failed bad.pdf: parse failed: not a PDF\n",
    )


def test_rate_limited_requests_wait_and_go_through(
    fake: FakeRagkb, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.add_kb("handbook")
    fake.rate_limited = 3
    code, out, _ = cli(fake, capsys, "sync", str(folder), "--kb", "handbook", "--concurrency", "1")
    assert (code, out) == (0, "uploaded 2, unchanged 0, deleted 0, failed 0\n")
    assert fake.rate_limited == 0


def test_retry_after_reads_seconds_and_http_dates() -> None:
    def waited(value: str | None) -> float:
        headers = {"Retry-After": value} if value is not None else {}
        return retry_after_s(httpx.Response(429, headers=headers), now=datetime(2025, 1, 1, tzinfo=UTC))

    assert waited("7") == 7
    assert waited("Wed, 01 Jan 2025 00:00:30 GMT") == 30
    assert waited(None) == waited("soon") == 1


def test_sse_parsing_skips_comments_and_joins_data_lines() -> None:
    lines = [": ping", "", "event: progress", 'data: {"a":', "data: 1}", "", "data: x"]
    assert list(parse_sse(lines)) == [("progress", '{"a":\n1}'), ("message", "x")]


# -- errors, kb, search -------------------------------------------------------------------------------------


def test_api_errors_print_the_problem_and_exit_2(
    fake: FakeRagkb, folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGKB_API_KEY", "wrong")
    assert cli(fake, capsys, "kb", "list") == (2, "", "error: Unauthorized: no or unknown API key\n")
    monkeypatch.setenv("RAGKB_API_KEY", KEY)
    code, _, err = cli(fake, capsys, "sync", str(folder), "--kb", "nope")
    assert code == 2 and err == "error: Not found: no knowledge base named 'nope' (or with that id)\n"


def test_usage_errors_exit_2(fake: FakeRagkb, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["search", "no kb given"], transport=fake.transport)
    assert raised.value.code == 2
    assert "the following arguments are required: --kb" in capsys.readouterr().err
    fake.add_kb("handbook")
    code, _, err = cli(fake, capsys, "sync", str(tmp_path / "missing"), "--kb", "handbook")
    assert code == 2 and err.startswith("error: not a folder:")


def test_the_key_falls_back_to_var_admin_key(
    fake: FakeRagkb, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAGKB_API_KEY")
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "admin.key").write_text(KEY + "\n", encoding="utf-8")
    assert cli(fake, capsys, "kb", "create", "handbook") == (0, "kb_1\n", "")


def test_kb_list_prints_a_table_or_json(fake: FakeRagkb, capsys: pytest.CaptureFixture[str]) -> None:
    kb_id = fake.add_kb("handbook")
    fake.kbs[kb_id]["document_counts"] = {"done": 3, "pending": 1, "processing": 0, "failed": 1}
    code, out, _ = cli(fake, capsys, "kb", "list")
    assert code == 0
    assert out.splitlines() == [
        "ID    NAME      DOCS  DONE  PENDING  PROCESSING  FAILED",
        "kb_1  handbook  5     3     1        0           1",
    ]
    assert json.loads(cli(fake, capsys, "kb", "list", "--json")[1])[0]["name"] == "handbook"


def test_kb_list_marks_a_kb_being_deleted(fake: FakeRagkb, capsys: pytest.CaptureFixture[str]) -> None:
    kb_id = fake.add_kb("old-handbook")
    fake.kbs[kb_id] |= {"status": "deleting", "deletion_job_id": "job_1", "document_counts": {"done": 2}}
    fake.add_kb("handbook", kb_id="kb_2")
    assert cli(fake, capsys, "kb", "list")[1].splitlines()[1:] == [
        "kb_1  old-handbook (deleting)  2     2     0        0           0",
        "kb_2  handbook                 0     0     0        0           0",
    ]


def test_search_prints_ranked_results_with_a_one_line_snippet(
    fake: FakeRagkb, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.add_kb("handbook")
    fake.add_kb("policies", kb_id="kb_p")
    code, out, _ = cli(fake, capsys, "search", "claims", "--kb", "handbook", "--kb", "kb_p", "--top-k", "3")
    assert code == 0
    assert out.splitlines() == [" 1. 0.5000  Travel policy (travel.md) > Expenses  p. 3", "    Claims within 30 days"]
    answer = json.loads(cli(fake, capsys, "search", "q", "--kb", "handbook", "--mode", "keyword", "--json")[1])
    assert answer["mode"] == "keyword"


def test_search_lines_and_snippets() -> None:
    assert search_lines({"results": []}) == ["no results"]
    assert snippet("word " * 100, limit=20) == "word word word wo..."
    assert snippet("  two\n lines ") == "two lines"


def test_an_ambiguous_kb_name_asks_for_the_id(fake: FakeRagkb) -> None:
    fake.add_kb("twin", "kb_a")
    fake.add_kb("twin", "kb_b")
    with ApiClient(URL, KEY, transport=fake.transport) as api, pytest.raises(ApiError, match="use an id"):
        api.resolve_kb("twin")


def test_deletion_line_says_done_still_going_or_failed_with_the_reason() -> None:
    kb = {"id": "kb_1", "name": "handbook"}
    job = {"id": "job_9", "progress": {"current": 40, "total": 120}, "errors": []}
    assert deletion_line(kb, job | {"status": "succeeded"}) == "deleted handbook (kb_1): 120 documents"
    running = deletion_line(kb, job | {"status": "running"})
    assert running == "deleting handbook (kb_1): job job_9 running, 40/120 documents (follow it: GET /v1/jobs/job_9)"
    failed = deletion_line(kb, job | {"status": "failed", "errors": [{"source_id": None, "message": "index: timeout"}]})
    assert failed == "deleting handbook (kb_1) failed: index: timeout (run the same command again to resume)"
