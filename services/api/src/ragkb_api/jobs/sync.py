"""The plan of a manifest sync: which files to upload, which are unchanged, which documents are orphans and
which files the KB's sync rules leave out. Pure: no I/O.

Exclude patterns run on the `regex` module with a timeout per match, as grep does (ragkb_api.tools.grep): a
catastrophic pattern on a long path stops at the deadline and that file is reported as an error (neither
uploaded nor deleted); a pattern that timed out once is not run again within the same plan, so a manifest of
thousands of paths costs at most one timeout per pattern; and matching a whole manifest has a time budget,
past which the remaining files are errors too."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

import regex

from ragkb_core.errors import InvalidInput
from ragkb_core.kb_settings import KbSync
from ragkb_store.states import DocumentStatus

# The most time one exclude pattern may take on one path, and all of them on a whole manifest.
MATCH_TIMEOUT_S = 0.05
PLAN_BUDGET_S = 10.0
UploadReason = Literal["new", "changed", "retry"]


@dataclass(frozen=True)
class ManifestEntry:
    source_id: str
    sha256: str


@dataclass(frozen=True)
class StoredDocument:
    id: str
    source_id: str
    sha256: str
    status: str
    version: int


@dataclass
class SyncPlan:
    upload: list[tuple[str, UploadReason]] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)  # (source_id, document_id)
    excluded: list[tuple[str, str]] = field(default_factory=list)  # (source_id, reason)
    # Files that could not be judged (their stored document, if any, is kept): (source_id, message).
    errors: list[tuple[str, str]] = field(default_factory=list)


class PatternTimedOut(Exception):
    """An exclude pattern ran out of time on a path: that path cannot be judged."""


@dataclass
class SyncRules:
    include_prefixes: tuple[str, ...]
    excludes: tuple[tuple[str, regex.Pattern[str]], ...]
    extensions: frozenset[str]
    # False for a source whose items are chosen otherwise (a web site's pages, by content type).
    check_extensions: bool = True
    timeout_s: float = MATCH_TIMEOUT_S
    budget_s: float = PLAN_BUDGET_S
    _timed_out: set[str] = field(default_factory=set)
    _deadline: float | None = None

    @classmethod
    def of(
        cls,
        sync: KbSync,
        timeout_s: float = MATCH_TIMEOUT_S,
        budget_s: float = PLAN_BUDGET_S,
        *,
        check_extensions: bool = True,
    ) -> SyncRules:
        return cls(
            include_prefixes=tuple(sync.include_prefixes),
            excludes=tuple((pattern, compile_exclude(pattern)) for pattern in sync.exclude_patterns),
            extensions=frozenset(sync.extensions),
            check_extensions=check_extensions,
            timeout_s=timeout_s,
            budget_s=budget_s,
        )

    def exclusion(self, source_id: str) -> str | None:
        """Why the rules leave this path out, or None when it belongs in the KB. PatternTimedOut when an
        exclude pattern could not decide in time."""
        if self.include_prefixes and not source_id.startswith(self.include_prefixes):
            return "outside the include prefixes"
        extension = PurePosixPath(source_id).suffix.lower()
        if self.check_extensions and extension not in self.extensions:
            return (
                f"extension {extension} is not eligible" if extension else "a file without an extension is not eligible"
            )
        for text, pattern in self.excludes:
            if self._matches(text, pattern, source_id):
                return f"matches exclude pattern '{text}'"
        return None

    def _matches(self, text: str, pattern: regex.Pattern[str], source_id: str) -> bool:
        if text in self._timed_out:
            raise PatternTimedOut(f"exclude pattern '{text}' timed out earlier in this sync")
        if self._deadline is None:
            self._deadline = time.monotonic() + self.budget_s
        remaining = self._deadline - time.monotonic()
        spent = f"the exclude patterns used up this sync's {self.budget_s:g} s of matching time"
        if remaining <= 0:
            raise PatternTimedOut(spent)
        try:
            return pattern.search(source_id, timeout=min(self.timeout_s, remaining)) is not None
        except TimeoutError:
            if remaining < self.timeout_s:
                raise PatternTimedOut(spent) from None
            self._timed_out.add(text)
            raise PatternTimedOut(f"exclude pattern '{text}' took longer than {self.timeout_s:g} s") from None


def compile_exclude(pattern: str) -> regex.Pattern[str]:
    """The pattern as the matcher runs it; InvalidInput (422) when the `regex` module refuses it."""
    try:
        return regex.compile(pattern)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise InvalidInput(f"exclude pattern {pattern!r} is not a valid regular expression: {exc}") from None


def plan_sync(files: Iterable[ManifestEntry], documents: Sequence[StoredDocument], rules: SyncRules) -> SyncPlan:
    """Compare the manifest with the KB's documents. An excluded file counts as absent, so its document (if
    any) is an orphan; a file that could not be judged keeps its document."""
    stored = {document.source_id: document for document in documents}
    plan = SyncPlan()
    kept: set[str] = set()
    for entry in files:
        try:
            reason = rules.exclusion(entry.source_id)
        except PatternTimedOut as exc:
            plan.errors.append((entry.source_id, str(exc)))
            kept.add(entry.source_id)
            continue
        if reason is not None:
            plan.excluded.append((entry.source_id, reason))
            continue
        kept.add(entry.source_id)
        _compare(entry, stored.get(entry.source_id), plan)
    plan.delete = [(doc.source_id, doc.id) for doc in documents if doc.source_id not in kept]
    return plan


def _compare(entry: ManifestEntry, document: StoredDocument | None, plan: SyncPlan) -> None:
    if document is None:
        plan.upload.append((entry.source_id, "new"))
    elif document.sha256 != entry.sha256:
        plan.upload.append((entry.source_id, "changed"))
    elif document.status == DocumentStatus.FAILED:
        plan.upload.append((entry.source_id, "retry"))
    else:
        plan.unchanged.append(entry.source_id)
