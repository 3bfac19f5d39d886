"""A stored original is shared by every document with the same bytes, so deleting one no document uses must not
take it from an upload of the same bytes that stored it a moment before recording its document (another KB's,
found when a KB was deleted while the same texts were uploaded to a new one). BlobStore.delete_unused sets each
blob aside and asks again before deleting it; a writer checks after its commit (ensure_stored). Each interleaving
of the deleter's steps with a writer's is played here, on a real folder."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from ragkb_store.blobs import BlobStore, sha256_of

DATA = b"Every employee receives twenty days of paid annual leave."
SHA = sha256_of(DATA)


def test_a_blob_no_document_uses_is_deleted_and_one_in_use_is_kept(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path)
    used = blobs.put(b"used by a document")
    blobs.put(DATA)
    assert blobs.delete_unused({SHA, used}, lambda shas: shas - {used}) == {SHA}
    assert not blobs.exists(SHA) and blobs.exists(used)
    assert not [entry for entry in tmp_path.iterdir() if entry.name.startswith(".deleting-")]


def test_a_document_recorded_while_the_blob_was_aside_keeps_it(tmp_path: Path) -> None:
    """The writer stored the blob before the first check and committed its row before the second."""
    blobs = BlobStore(tmp_path)
    blobs.put(DATA)
    answers = iter([{SHA}, set()])  # unused at the first check; the row is committed by the second
    assert blobs.delete_unused({SHA}, lambda shas: next(answers) & shas) == set()
    assert blobs.read(SHA) == DATA


def test_a_writer_whose_commit_came_after_both_checks_stores_it_again(tmp_path: Path) -> None:
    """Stored before the deleter set it aside, recorded after the second check: the deleter deletes its copy, and
    the writer's check after its commit stores the bytes again."""
    blobs = BlobStore(tmp_path)
    blobs.put(DATA)
    assert blobs.delete_unused({SHA}, lambda shas: shas) == {SHA}
    assert not blobs.exists(SHA)
    blobs.ensure_stored(SHA, DATA)  # what the writer does once its row is committed
    assert blobs.read(SHA) == DATA


def test_bytes_stored_again_while_the_old_copy_was_aside_stay(tmp_path: Path) -> None:
    """A writer stores the same bytes while the deleter holds the old copy aside: the deleter deletes only its own
    copy, whatever the second check says."""
    blobs = BlobStore(tmp_path)
    blobs.put(DATA)
    calls = 0

    def unused(shas: set[str]) -> set[str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return shas
        blobs.put(DATA)  # the upload's write, between the deleter's two checks; its row not committed yet
        return shas

    assert blobs.delete_unused({SHA}, unused) == {SHA}
    assert blobs.read(SHA) == DATA
    blobs.ensure_stored(SHA, DATA)  # nothing to do
    assert blobs.read(SHA) == DATA


def test_a_blob_left_aside_by_a_deletion_that_died_is_put_back_by_the_sweep(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path)
    blobs.put(DATA)
    stored = tmp_path / SHA[:2] / SHA[2:4] / SHA
    aside = tmp_path / f".deleting-{SHA}-0123456789abcdef"
    os.rename(stored, aside)  # a deleter's first step, then it died
    an_hour_ago = time.time() - 3600
    os.utime(aside, (an_hour_ago, an_hour_ago))
    assert list(blobs.older_than(60)) == [SHA]  # back in place, and a candidate of the orphan sweep again
    assert blobs.read(SHA) == DATA and not aside.exists()
    assert blobs.delete_unused({SHA}, lambda shas: set()) == set()  # a document uses it: it stays
    assert blobs.read(SHA) == DATA


def test_a_restore_keeps_the_blobs_a_deletion_took_before_its_commit(tmp_path: Path) -> None:
    """A writer of many blobs (a restore) pins each one it stores; a deletion between the write and the commit
    takes the stored blob, and the pins put it back once the rows are committed."""
    blobs = BlobStore(tmp_path)
    with blobs.pinned() as pins:
        assert pins.put(DATA) == SHA
        assert blobs.delete_unused({SHA}, lambda shas: shas) == {SHA}  # another KB's deletion, before the commit
        assert not blobs.exists(SHA) and pins.holds(SHA)
        pins.ensure_stored()  # what the writer does once its rows are committed
        assert blobs.read(SHA) == DATA
    assert not [entry for entry in tmp_path.iterdir() if entry.name.startswith(".pins-")]
    assert blobs.read(SHA) == DATA  # the pins went, the blob stays


def test_pins_left_by_a_writer_that_died_are_removed_by_the_sweep(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path)
    pins_folder = tmp_path / ".pins-dead"
    pins_folder.mkdir()
    blobs.put(DATA)
    os.link(tmp_path / SHA[:2] / SHA[2:4] / SHA, pins_folder / SHA)
    an_hour_ago = time.time() - 3600
    os.utime(pins_folder, (an_hour_ago, an_hour_ago))
    list(blobs.older_than(60))
    assert not pins_folder.exists() and blobs.read(SHA) == DATA


def test_pins_on_a_file_system_without_hard_links_keep_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_hard_links(source: object, target: object) -> None:
        raise OSError(errno.EPERM, "hard links are not supported here")

    monkeypatch.setattr(os, "link", no_hard_links)
    blobs = BlobStore(tmp_path)
    with blobs.pinned() as pins:
        pins.put(DATA)
        assert blobs.delete_unused({SHA}, lambda shas: shas) == {SHA}
        pins.ensure_stored()
        assert blobs.read(SHA) == DATA
