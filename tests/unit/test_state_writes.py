"""Every write of a document's or a job's state lives in libs/store (the ledger): no other module of the
services or libraries may set a status or a lease, or record a job or an item. A status write elsewhere is a
transition nobody can find from the ledger; this test names where it is."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STORE = REPO / "libs" / "store"
# What a status write looks like: an attribute assignment, a status value in an UPDATE or constructor, a job or
# item row made, a lease set.
STATE_WRITE = re.compile(
    r"^\s*(?:[\w.]+\s*,\s*)*\w+(?<!self)\.status\s*(?:,\s*[\w.]+\s*)*=(?!=)"
    r"|\bstatus\s*=\s*(?:DocumentStatus|JobStatus|JobItemStatus)\."
    r"|\b(?:Job|JobItem)\("
    r"|\blease_until\s*=(?!=)"
    r"|\.values\([^)]*\bstatus\s*="
)


def state_writes_outside_store() -> list[str]:
    found = []
    for folder in ("libs", "services"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if STORE in path.parents or "migrations" in path.parts:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if STATE_WRITE.search(line) and not line.lstrip().startswith("#"):
                    found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    return found


def test_document_and_job_state_is_written_only_by_the_store() -> None:
    assert state_writes_outside_store() == []


def test_the_pattern_finds_each_kind_of_state_write() -> None:
    # The check itself must bite: each of these is a write it has to flag.
    writes = [
        "document.status = DocumentStatus.PENDING",
        "job.status, job.finished_at = JobStatus.FAILED, now",
        ".values(status=DocumentStatus.FAILED, error=reason)",
        "session.add(Job(id=new_id(), kind=JobKind.INGEST))",
        "session.add(JobItem(job_id=job_id))",
        "document.lease_until = None",
    ]
    assert all(STATE_WRITE.search(line) for line in writes)
    reads = [
        "if document.status == DocumentStatus.FAILED:",
        "Job.status.in_(ACTIVE_JOB_STATUSES)",
        "self.status = status  # an HTTP status",
        "BatchItemError(status=exc.status, title=exc.title)",
    ]
    assert not any(STATE_WRITE.search(line) for line in reads)
