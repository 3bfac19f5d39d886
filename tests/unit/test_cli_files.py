"""ragkb CLI, local side: the folder walk and the ledger that spares unchanged files a second hashing."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest

from ragkb_cli.files import (
    LedgerEntry,
    fingerprint,
    ledger_path,
    load_ledger,
    save_ledger,
    sha256_file,
    walk,
)


class CountingHasher:
    """The real hasher, counting the files it reads."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def __call__(self, path: Path) -> str:
        self.paths.append(path)
        return sha256_file(path)


def write(root: Path, relative: str, text: str = "content") -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def ids(root: Path, **kwargs: list[Path]) -> list[str]:
    return [local.source_id for local in walk(root, **kwargs)]


def test_walk_gives_relative_forward_slash_ids_sorted(tmp_path: Path) -> None:
    for relative in ("b.md", "docs/a.md", "docs/deep/er/c.txt"):
        write(tmp_path, relative)
    assert ids(tmp_path) == ["b.md", "docs/a.md", "docs/deep/er/c.txt"]
    local = walk(tmp_path)[0]
    assert local.size == len("content") and local.path == (tmp_path / "b.md").resolve()


def test_walk_ids_are_nfc_whatever_the_file_system_stores(tmp_path: Path) -> None:
    decomposed = unicodedata.normalize("NFD", "ガイド.md")
    write(tmp_path, decomposed)
    assert ids(tmp_path) == [unicodedata.normalize("NFC", "ガイド.md")]


def test_walk_skips_hidden_entries_and_the_given_paths(tmp_path: Path) -> None:
    write(tmp_path, "keep.md")
    write(tmp_path, ".DS_Store")
    write(tmp_path, ".git/config")
    write(tmp_path, "cache/ragkb/sync/0123.json")
    assert ids(tmp_path, skip=[tmp_path / "cache" / "ragkb" / "sync"]) == ["keep.md"]


def test_walk_follows_no_link_out_of_the_folder(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    write(root, "real/a.md")
    write(outside, "secret.md")
    (root / "inside-link.md").symlink_to(root / "real" / "a.md")
    (root / "outside-link.md").symlink_to(outside / "secret.md")
    (root / "linked-folder").symlink_to(outside, target_is_directory=True)
    (root / "loop").symlink_to(root, target_is_directory=True)
    (root / "broken.md").symlink_to(root / "missing.md")
    assert ids(root) == ["inside-link.md", "real/a.md"]


def test_unchanged_files_reuse_the_ledger_hash(tmp_path: Path) -> None:
    for name in ("a.md", "b.md", "c.md"):
        write(tmp_path, name, name)
    hasher = CountingHasher()
    first = fingerprint(walk(tmp_path), {}, hasher)
    assert len(hasher.paths) == 3 and first.hashed == 3

    hasher.paths.clear()
    second = fingerprint(walk(tmp_path), first.entries, hasher)
    assert hasher.paths == [] and second.entries == first.entries


def test_a_changed_size_or_mtime_is_hashed_again(tmp_path: Path) -> None:
    write(tmp_path, "same.md", "same")
    grown = write(tmp_path, "grown.md", "short")
    touched = write(tmp_path, "touched.md", "text")
    ledger = fingerprint(walk(tmp_path), {}).entries
    grown.write_text("much longer now", encoding="utf-8")
    stat = touched.stat()
    os.utime(touched, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))

    hasher = CountingHasher()
    now = fingerprint(walk(tmp_path), ledger, hasher)
    assert sorted(path.name for path in hasher.paths) == ["grown.md", "touched.md"]
    assert now.entries["grown.md"].sha256 == sha256_file(grown) != ledger["grown.md"].sha256
    assert now.entries["touched.md"].sha256 == ledger["touched.md"].sha256  # same bytes, new mtime recorded
    assert now.entries["touched.md"].mtime_ns != ledger["touched.md"].mtime_ns


def test_an_unreadable_file_is_reported_not_raised(tmp_path: Path) -> None:
    write(tmp_path, "ok.md")
    doomed = write(tmp_path, "doomed.md")
    files = walk(tmp_path)
    doomed.unlink()  # vanishes between the walk and the hashing
    result = fingerprint(files, {})
    assert list(result.entries) == ["ok.md"]
    assert result.unreadable == {"doomed.md": "the file vanished"}


def test_sha256_file_matches_hashlib_across_chunks(tmp_path: Path) -> None:
    import hashlib

    data = os.urandom(3 * 1024 * 1024 + 17)
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_ledger_round_trips_and_a_corrupt_one_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "sync" / "ledger.json"
    entries = {"docs/a.md": LedgerEntry(mtime_ns=1, size=2, sha256="ab" * 32)}
    save_ledger(path, entries)
    assert load_ledger(path) == entries
    assert [entry.name for entry in path.parent.iterdir()] == ["ledger.json"]  # no temporary file left

    path.write_text("{not json", encoding="utf-8")
    assert load_ledger(path) == {}
    assert load_ledger(tmp_path / "absent.json") == {}


def test_ledger_path_is_one_per_server_kb_and_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    here = ledger_path("http://h:8000", "kb1", tmp_path)
    assert here.parent == tmp_path / "cache" / "ragkb" / "sync"
    assert len(here.stem) == 16
    assert here == ledger_path("http://h:8000/", "kb1", tmp_path)
    others = {ledger_path("http://h:9000", "kb1", tmp_path), ledger_path("http://h:8000", "kb2", tmp_path)}
    others.add(ledger_path("http://h:8000", "kb1", tmp_path / "sub"))
    assert here not in others and len(others) == 3
