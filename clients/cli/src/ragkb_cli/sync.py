"""`ragkb sync DIR`: manifest → plan → concurrent uploads → follow the server's job → one summary."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ragkb_cli.api import TERMINAL_JOB_STATUSES, ApiClient, ApiError, Json
from ragkb_cli.files import (
    Fingerprints,
    Hasher,
    LedgerEntry,
    LocalFile,
    fingerprint,
    load_ledger,
    read_failure,
    save_ledger,
    sha256_file,
    walk,
)
from ragkb_cli.progress import ProgressFactory

POLL_INTERVAL_S = 1.0


@dataclass
class SyncOptions:
    dry_run: bool = False
    concurrency: int = 4
    timeout_s: float = 3600.0
    hasher: Hasher = sha256_file


@dataclass
class SyncReport:
    """What a sync did (or, dry, would do); `failures` maps a source id to why it failed."""

    plan: Json
    uploaded: int = 0
    unchanged: int = 0
    deleted: int = 0
    failures: dict[str, str] = field(default_factory=dict)
    extra_failed: int = 0  # failures the job counted without naming them

    @property
    def failed(self) -> int:
        return len(self.failures) + self.extra_failed

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


@dataclass
class JobOutcome:
    status: str
    counts: dict[str, int]
    errors: dict[str, str]
    message: str | None = None


class SyncRun:
    """One sync of a folder into a KB; `run()` returns the report and raises `ApiError` if the plan fails."""

    def __init__(
        self,
        api: ApiClient,
        kb_id: str,
        root: Path,
        *,
        ledger: Path,
        options: SyncOptions,
        progress: ProgressFactory,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api, self.kb_id, self.root, self.ledger = api, kb_id, root.resolve(), ledger
        self.options, self.progress, self.sleep = options, progress, sleep

    def run(self) -> SyncReport:
        files = {local.source_id: local for local in walk(self.root, skip=[self.ledger.parent])}
        previous = load_ledger(self.ledger)
        prints = fingerprint(files.values(), previous, self.options.hasher)
        plan = self.api.sync(self.kb_id, manifest(prints, previous), self.options.dry_run)
        report = SyncReport(plan=plan, failures=dict(prints.unreadable))
        if self.options.dry_run:
            return report
        # Hashes are facts about the files: worth keeping even if an upload fails below.
        save_ledger(self.ledger, prints.entries)
        wanted = plan.get("upload", [])
        abandoned = self._upload_all(wanted, files, report)
        report.uploaded, report.unchanged = len(wanted) - abandoned, len(plan.get("unchanged", []))
        report.deleted = len(plan.get("delete", []))
        job_id = plan.get("job_id")
        if job_id:
            self._apply_job(self._follow(str(job_id), abandoned), report)
        return report

    # -- uploads --------------------------------------------------------------------------------------

    def _upload_all(self, wanted: list[Json], files: dict[str, LocalFile], report: SyncReport) -> int:
        """Upload the plan's files, `concurrency` at a time; answers how many could not be uploaded."""
        bar = self.progress(len(wanted), "uploading")
        abandoned = 0
        with ThreadPoolExecutor(max_workers=max(1, self.options.concurrency)) as pool:
            futures = {pool.submit(self._upload_one, str(entry["source_id"]), files): entry for entry in wanted}
            for future in as_completed(futures):
                source_id, failure = future.result()
                if failure is not None:
                    abandoned += 1
                    report.failures.setdefault(source_id, failure)
                bar.advance()
        bar.close()
        return abandoned

    def _upload_one(self, source_id: str, files: dict[str, LocalFile]) -> tuple[str, str | None]:
        local = files.get(source_id)
        if local is None:
            return source_id, "the server asked for a file this folder does not have"
        try:
            self.api.upload(self.kb_id, local.path, source_id)
        except OSError as exc:
            return source_id, read_failure(exc)
        except ApiError as exc:
            return source_id, f"{exc.title}: {exc.detail}"
        return source_id, None

    # -- the server's job --------------------------------------------------------------------------------

    def _follow(self, job_id: str, abandoned: int) -> JobOutcome:
        """The job's end, from its event stream; polled instead whenever the stream breaks or ends early.

        `abandoned` uploads of the plan failed here: the server waits for them (until its upload wait runs
        out), so the sync stops following once everything else has settled."""
        deadline = time.monotonic() + self.options.timeout_s
        bar = self.progress(None, "indexing")
        try:
            for event, data in self.api.job_events(job_id):
                if event == "progress":
                    bar.set(int(data.get("current", 0)), data.get("total"))
                    if _only_abandoned_open(data, abandoned):
                        return _outcome("running", self.api.job(job_id))
                elif event == "complete":
                    return _outcome("succeeded", data)
                elif event == "error":
                    return self._poll(job_id, deadline, abandoned, str(data.get("message", "the job failed")))
        except (ApiError, httpx.HTTPError, ValueError):
            pass
        finally:
            bar.close()
        return self._poll(job_id, deadline, abandoned)

    def _poll(self, job_id: str, deadline: float, abandoned: int, message: str | None = None) -> JobOutcome:
        while True:
            job = self.api.job(job_id)
            status = str(job.get("status", ""))
            if status in TERMINAL_JOB_STATUSES:
                outcome = _outcome(status, job)
                outcome.message = message or (None if status == "succeeded" else f"the job ended {status}")
                return outcome
            if _only_abandoned_open(job.get("progress") or {}, abandoned):
                return _outcome(status, job)
            if time.monotonic() >= deadline:
                return JobOutcome("timeout", {}, {}, f"the job is still {status} after {self.options.timeout_s:g} s")
            self.sleep(POLL_INTERVAL_S)

    @staticmethod
    def _apply_job(outcome: JobOutcome, report: SyncReport) -> None:
        for key in ("uploaded", "unchanged", "deleted"):
            if key in outcome.counts:
                setattr(report, key, outcome.counts[key])
        for source_id, message in outcome.errors.items():
            report.failures.setdefault(source_id, message)
        unnamed = outcome.counts.get("failed", 0) - len(outcome.errors)
        report.extra_failed = max(0, unnamed)
        if outcome.message and (outcome.status == "timeout" or not report.failed):
            report.failures["(job)"] = outcome.message


def manifest(prints: Fingerprints, previous: dict[str, LedgerEntry]) -> list[Json]:
    """The files as the server sees them. A file that could not be read is sent as it was last time, when
    it was known: a read error must not make the server delete the document."""
    entries = dict(prints.entries)
    for source_id in prints.unreadable:
        if source_id in previous:
            entries[source_id] = previous[source_id]
    return [
        {"source_id": sid, "sha256": entry.sha256, "size": entry.size, "mtime": entry.mtime_ns / 1e9}
        for sid, entry in sorted(entries.items())
    ]


def _only_abandoned_open(progress: dict[str, Any], abandoned: int) -> bool:
    total = progress.get("total")
    return bool(abandoned) and isinstance(total, int) and int(progress.get("current", 0)) + abandoned >= total


def _outcome(status: str, data: dict[str, Any]) -> JobOutcome:
    counts = {str(key): int(value) for key, value in (data.get("counts") or {}).items()}
    errors = {str(error.get("source_id")): str(error.get("message", "")) for error in data.get("errors") or []}
    return JobOutcome(status, counts, errors)
