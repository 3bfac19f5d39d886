"""The consistency check's comparison of the database with the index (ragkb_store.consistency)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ragkb_store.consistency import DocumentState, Finding, FindingKind, compare, confirmed, repair_plan

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def done(document_id: str, version: int = 1, chunks: int = 3) -> DocumentState:
    return DocumentState(document_id, "done", version, version, chunks)


def kinds(findings: list[Finding]) -> list[tuple[str, str, int | None]]:
    return [finding.key for finding in findings]


def test_an_index_that_holds_exactly_the_serving_versions_is_clean() -> None:
    documents = [done("a"), done("b", version=2, chunks=1)]
    assert compare(documents, {"a": {1: 3}, "b": {2: 1}}, NOW) == []


def test_a_done_document_without_points_or_with_too_few_is_found() -> None:
    findings = compare([done("a"), done("b")], {"b": {1: 2}}, NOW)
    assert kinds(findings) == [("missing_points", "a", 1), ("chunk_count_mismatch", "b", 1)]
    assert (findings[1].expected, findings[1].found) == (3, 2)


def test_points_of_a_superseded_version_and_of_an_unknown_document_are_orphans() -> None:
    findings = compare([done("a", version=2)], {"a": {1: 4, 2: 3}, "ghost": {1: 5}}, NOW)
    assert kinds(findings) == [("orphan_version", "a", 1), ("orphan_document", "ghost", None)]
    assert findings[1].found == 5


def test_a_document_in_flight_may_hold_the_version_being_built_and_lose_its_old_one() -> None:
    building = DocumentState("a", "processing", 2, 1, 3, lease_until=NOW + timedelta(minutes=5))
    assert compare([building], {"a": {1: 3, 2: 7}}, NOW) == []
    assert compare([building], {"a": {2: 7}}, NOW) == []  # the worker finished between the two reads
    assert kinds(compare([building], {"a": {1: 3, 2: 7, 3: 1}}, NOW)) == [("orphan_version", "a", 3)]


def test_a_failed_new_version_keeps_the_old_one_serving_and_may_not_leave_its_points() -> None:
    failed = DocumentState("a", "failed", 2, 1, 3)
    assert compare([failed], {"a": {1: 3}}, NOW) == []
    assert kinds(compare([failed], {"a": {1: 3, 2: 2}}, NOW)) == [("orphan_version", "a", 2)]
    assert compare([DocumentState("b", "failed", 1, None, 0)], {}, NOW) == []


def test_processing_past_the_lease_is_stuck() -> None:
    stuck = DocumentState("a", "processing", 1, None, 0, lease_until=NOW - timedelta(seconds=1))
    naive = DocumentState("b", "processing", 1, None, 0, lease_until=(NOW - timedelta(hours=1)).replace(tzinfo=None))
    assert kinds(compare([stuck, naive], {}, NOW)) == [("stuck", "a", None), ("stuck", "b", None)]


def test_the_repair_plan_requeues_what_is_missing_and_deletes_orphans_once_each() -> None:
    documents = [done("a"), done("b", version=2), DocumentState("c", "processing", 1, None, 0, lease_until=NOW)]
    findings = compare(documents, {"a": {1: 1}, "b": {1: 2}, "ghost": {3: 1}}, NOW + timedelta(seconds=1))
    plan = repair_plan(findings)
    assert plan.requeue == ["a", "b", "c"]
    assert plan.delete_versions == [("b", 1)]
    assert plan.delete_documents == ["ghost"]
    assert repair_plan([]).is_empty


def test_only_findings_seen_in_both_passes_are_confirmed() -> None:
    first = compare([done("a"), done("b")], {"a": {1: 3}}, NOW)
    second = compare([done("a", chunks=2), done("b")], {"a": {1: 3}}, NOW)
    assert kinds(confirmed(first, second)) == [("missing_points", "b", 1)]
    assert kinds(compare([done("a")], {"a": {1: 3}}, NOW)) == []
    assert FindingKind.STUCK.value == "stuck"
