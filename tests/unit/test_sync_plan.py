"""The manifest sync plan and the KB's sync rules (include prefixes, exclude patterns, extensions)."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from ragkb_api.jobs.sync import ManifestEntry, StoredDocument, SyncRules, compile_exclude, plan_sync
from ragkb_core.errors import InvalidInput
from ragkb_core.formats import EXTENSION_MEDIA_TYPES
from ragkb_core.kb_settings import KbSync

A, B = "a" * 64, "b" * 64


def stored(source_id: str, sha: str = A, status: str = "done") -> StoredDocument:
    return StoredDocument(id=f"id-{source_id}", source_id=source_id, sha256=sha, status=status, version=1)


def test_the_plan_uploads_new_changed_and_failed_keeps_the_rest_and_deletes_orphans() -> None:
    manifest = [ManifestEntry("new.md", A), ManifestEntry("changed.md", B), ManifestEntry("same.md", A)]
    manifest.append(ManifestEntry("broken.md", A))
    documents = [stored("changed.md"), stored("same.md"), stored("broken.md", status="failed"), stored("gone.md")]
    plan = plan_sync(manifest, documents, SyncRules.of(KbSync()))
    assert plan.upload == [("new.md", "new"), ("changed.md", "changed"), ("broken.md", "retry")]
    assert plan.unchanged == ["same.md"]
    assert plan.delete == [("gone.md", "id-gone.md")]
    assert plan.excluded == [] and plan.errors == []


def test_a_second_plan_of_the_same_folder_uploads_nothing() -> None:
    manifest = [ManifestEntry(f"docs/{n}.txt", A) for n in range(20)]
    documents = [stored(entry.source_id) for entry in manifest]
    plan = plan_sync(manifest, documents, SyncRules.of(KbSync()))
    assert (plan.upload, plan.delete, len(plan.unchanged)) == ([], [], 20)


@pytest.mark.parametrize(
    ("source_id", "reason"),
    [
        (".git/config.txt", "matches exclude pattern '(^|/)\\.'"),
        ("docs/.hidden.md", "matches exclude pattern '(^|/)\\.'"),
        ("notes.md~", "extension .md~ is not eligible"),
        ("web/node_modules/x/readme.md", "matches exclude pattern '(^|/)node_modules/'"),
        ("pkg/__pycache__/m.py", "matches exclude pattern '(^|/)__pycache__/'"),
        ("draft.tmp", "extension .tmp is not eligible"),
        ("tool.exe", "extension .exe is not eligible"),
        ("Makefile", "a file without an extension is not eligible"),
    ],
)
def test_default_rules_leave_out_hidden_junk_and_unparseable_files(source_id: str, reason: str) -> None:
    assert SyncRules.of(KbSync()).exclusion(source_id) == reason


def test_an_excluded_file_is_never_uploaded_and_its_document_becomes_an_orphan() -> None:
    rules = SyncRules.of(KbSync(exclude_patterns=[r"^private/"], include_prefixes=["docs/", "private/"]))
    manifest = [ManifestEntry("private/salary.md", A), ManifestEntry("docs/a.md", A), ManifestEntry("src/b.md", A)]
    plan = plan_sync(manifest, [stored("private/salary.md")], rules)
    assert plan.upload == [("docs/a.md", "new")]
    assert plan.excluded == [
        ("private/salary.md", "matches exclude pattern '^private/'"),
        ("src/b.md", "outside the include prefixes"),
    ]
    assert plan.delete == [("private/salary.md", "id-private/salary.md")]


def test_extensions_default_to_every_parseable_one_and_may_be_narrowed() -> None:
    assert set(KbSync().extensions) == set(EXTENSION_MEDIA_TYPES)
    rules = SyncRules.of(KbSync(extensions=["MD", ".txt"]))
    assert rules.exclusion("a.md") is None and rules.exclusion("b.TXT") is None
    assert rules.exclusion("c.pdf") == "extension .pdf is not eligible"


@pytest.mark.parametrize(
    "sync",
    [
        {"exclude_patterns": ["(unclosed"]},
        {"exclude_patterns": ["x" * 501]},
        {"exclude_patterns": [""]},
        {"exclude_patterns": ["a"] * 101},
        {"extensions": [".exe"]},
    ],
)
def test_invalid_sync_rules_are_refused(sync: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        KbSync.model_validate(sync)


def test_a_pattern_the_matcher_cannot_compile_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        compile_exclude("(?<name")


def test_a_catastrophic_pattern_times_out_once_and_its_paths_are_errors_never_a_hang() -> None:
    rules = SyncRules.of(KbSync(exclude_patterns=[r"(x+x+)+y"]), timeout_s=0.05)
    manifest = [ManifestEntry("x" * 500 + f"{n}.md", A) for n in range(2000)]
    started = time.monotonic()
    plan = plan_sync(manifest, [stored(manifest[0].source_id)], rules)
    assert time.monotonic() - started < 2
    assert len(plan.errors) == 2000 and plan.upload == []
    assert "took longer than" in plan.errors[0][1] and "timed out earlier" in plan.errors[1][1]
    assert plan.delete == []  # a file that could not be judged keeps its document


def test_matching_a_whole_manifest_has_a_time_budget() -> None:
    rules = SyncRules.of(KbSync(exclude_patterns=[r"(x+x+)+y"]), timeout_s=5, budget_s=0.3)
    manifest = [ManifestEntry("x" * 40 + f"{n}.md", A) for n in range(5000)]
    started = time.monotonic()
    plan = plan_sync(manifest, [], rules)
    assert time.monotonic() - started < 2
    assert plan.errors and "matching time" in plan.errors[-1][1]
    assert len(plan.upload) + len(plan.errors) == 5000
