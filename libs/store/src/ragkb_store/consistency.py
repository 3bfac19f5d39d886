"""Does a KB's index hold what its metadata says? The comparison, as a pure function of both sides.

The database says, per document, which version serves (`indexed_version`) and how many chunks it has; the
index is counted per document and version (the retriever's point census). A document that is `done` (or
`failed` while an older version keeps serving) must have exactly its serving version's chunks. A document
in flight (`pending`, `processing`) may also hold points of the version being built, and its serving
version may be replaced at any moment, so only points of versions it can never serve count against it.
Points of a document the database does not know are orphans, and so are a version's points that no
document state allows (a superseded or deleted version). A `processing` document whose lease ran out is
stuck: its worker died.

`repair_plan` says what puts each finding right: re-queue the document through the ledger (the worker
rebuilds its version and deletes the others) or delete the orphan points. Every action is idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from ragkb_store.states import DocumentStatus


class FindingKind(StrEnum):
    # A settled document's serving version has no points in the index.
    MISSING_POINTS = "missing_points"
    # It has points, but not as many as the database's chunk count.
    CHUNK_COUNT_MISMATCH = "chunk_count_mismatch"
    # Points of a version of a known document that no state of it allows (superseded, deleted, failed).
    ORPHAN_VERSION = "orphan_version"
    # Points of a document the database does not have.
    ORPHAN_DOCUMENT = "orphan_document"
    # A document `processing` past its lease: its worker died and nobody took it over yet.
    STUCK = "stuck"


# Findings put right by building the document again; the others by deleting points.
REQUEUE_KINDS = frozenset({FindingKind.MISSING_POINTS, FindingKind.CHUNK_COUNT_MISMATCH, FindingKind.STUCK})
SETTLED_STATUSES = frozenset({DocumentStatus.DONE, DocumentStatus.FAILED})


@dataclass(frozen=True)
class DocumentState:
    """What the database says about one document, as far as the index is concerned."""

    document_id: str
    status: str
    version: int
    indexed_version: int | None
    chunk_count: int
    lease_until: datetime | None = None


@dataclass(frozen=True)
class Finding:
    kind: FindingKind
    document_id: str
    detail: str
    version: int | None = None
    expected: int | None = None
    found: int | None = None

    @property
    def key(self) -> tuple[str, str, int | None]:
        """What makes two findings the same (a second pass confirms the first by it)."""
        return self.kind.value, self.document_id, self.version


@dataclass(frozen=True)
class RepairPlan:
    requeue: list[str] = field(default_factory=list)
    delete_versions: list[tuple[str, int]] = field(default_factory=list)
    delete_documents: list[str] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not (self.requeue or self.delete_versions or self.delete_documents)


Census = Mapping[str, Mapping[int, int]]


def compare(documents: Sequence[DocumentState], census: Census, now: datetime) -> list[Finding]:
    """Every disagreement between the database's `documents` and the index's `census` (document id →
    version → points), in a stable order."""
    known = {document.document_id for document in documents}
    findings: list[Finding] = []
    for document in documents:
        findings += _document_findings(document, census.get(document.document_id, {}), now)
    findings += [
        _orphan_document(document_id, census[document_id]) for document_id in census if document_id not in known
    ]
    return sorted(findings, key=lambda finding: (finding.document_id, finding.kind.value, finding.version or 0))


def confirmed(first: Iterable[Finding], second: Iterable[Finding]) -> list[Finding]:
    """The findings of `second` that `first` had too: two passes a moment apart drop what a document moving
    on between reading the database and counting the index made look wrong for an instant."""
    earlier = {finding.key for finding in first}
    return [finding for finding in second if finding.key in earlier]


def repair_plan(findings: Iterable[Finding]) -> RepairPlan:
    plan = RepairPlan()
    for finding in findings:
        if finding.kind in REQUEUE_KINDS and finding.document_id not in plan.requeue:
            plan.requeue.append(finding.document_id)
        elif finding.kind is FindingKind.ORPHAN_VERSION and finding.version is not None:
            plan.delete_versions.append((finding.document_id, finding.version))
        elif finding.kind is FindingKind.ORPHAN_DOCUMENT:
            plan.delete_documents.append(finding.document_id)
    return plan


def _document_findings(document: DocumentState, versions: Mapping[int, int], now: datetime) -> list[Finding]:
    orphans = (_orphan_version(document, version, count) for version, count in versions.items())
    findings = [finding for finding in orphans if finding is not None]
    if document.status in SETTLED_STATUSES and document.indexed_version is not None:
        findings += _serving_version_findings(document, versions.get(document.indexed_version, 0))
    elif document.status == DocumentStatus.DONE:  # done without a serving version: nothing can be found
        findings.append(Finding(FindingKind.MISSING_POINTS, document.document_id, "done but no version is indexed"))
    if _is_stuck(document, now):
        findings.append(
            Finding(FindingKind.STUCK, document.document_id, f"processing past its lease ({document.lease_until})")
        )
    return findings


def _allowed_versions(document: DocumentState) -> set[int]:
    """The versions whose points the document may hold in its state."""
    allowed = {document.indexed_version} if document.indexed_version is not None else set()
    if document.status not in SETTLED_STATUSES:
        allowed.add(document.version)  # the version being built
    return {version for version in allowed if version is not None}


def _orphan_version(document: DocumentState, version: int, count: int) -> Finding | None:
    if version in _allowed_versions(document) or count == 0:
        return None
    return Finding(
        FindingKind.ORPHAN_VERSION,
        document.document_id,
        f"{count} points of version {version}, which a {document.status} document at version "
        f"{document.version} (serving {document.indexed_version}) does not hold",
        version=version,
        found=count,
    )


def _serving_version_findings(document: DocumentState, found: int) -> list[Finding]:
    version, expected = document.indexed_version, document.chunk_count
    if found == expected:
        return []
    if found == 0:
        detail = f"version {version} should have {expected} points in the index and has none"
        return [Finding(FindingKind.MISSING_POINTS, document.document_id, detail, version, expected, found)]
    detail = f"version {version} has {found} points in the index, the database counts {expected} chunks"
    return [Finding(FindingKind.CHUNK_COUNT_MISMATCH, document.document_id, detail, version, expected, found)]


def _orphan_document(document_id: str, versions: Mapping[int, int]) -> Finding:
    total = sum(versions.values())
    return Finding(
        FindingKind.ORPHAN_DOCUMENT,
        document_id,
        f"{total} points of a document the database does not have",
        found=total,
    )


def _is_stuck(document: DocumentState, now: datetime) -> bool:
    lease = document.lease_until
    return document.status == DocumentStatus.PROCESSING and (lease is None or _aware(lease) < now)


def _aware(moment: datetime) -> datetime:
    # SQLite hands timezone-aware columns back naive (in UTC).
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
