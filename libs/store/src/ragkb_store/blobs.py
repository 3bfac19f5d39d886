"""Original uploads, stored content-addressed by sha256 in a local folder."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ragkb_core.errors import InvalidInput, NotFound, Unavailable

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# A blob a deletion has set aside while it checks again that no document uses it (BlobStore.delete_unused).
_ASIDE_PREFIX = ".deleting-"
# A writer's hard links to the blobs it stored, kept until its rows are committed (BlobStore.pinned).
_PINS_PREFIX = ".pins-"
# A full disk (or quota) is transient: space comes back when an operator frees some. Uploads answer 503 with
# Retry-After meanwhile and the worker retries, rather than a 500 or a document failed for good.
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobStore:
    """`root/ab/cd/<sha256>`. Writes go to a temp file then rename, so a reader never sees half a blob.

    Paths derive only from validated hex digests: nothing a client sends can name a path.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def put(self, data: bytes) -> str:
        return self.put_chunks([data])

    def put_chunks(self, chunks: Iterable[bytes]) -> str:
        try:
            return self._write(chunks)
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                raise Unavailable("the blob store's disk is full: free space on it, then try again") from exc
            raise

    def _write(self, chunks: Iterable[bytes]) -> str:
        digest = hashlib.sha256()
        fd, temp_name = tempfile.mkstemp(dir=self.root, prefix=".incoming-")
        try:
            with os.fdopen(fd, "wb") as temp:
                for chunk in chunks:
                    digest.update(chunk)
                    temp.write(chunk)
                temp.flush()
                os.fsync(temp.fileno())
            sha = digest.hexdigest()
            self._move_into_place(sha, Path(temp_name))
            return sha
        except BaseException:
            Path(temp_name).unlink(missing_ok=True)
            raise

    def read(self, sha: str) -> bytes:
        path = self._path(sha)
        if not path.exists():
            raise NotFound(f"blob {sha} is missing from the blob store")
        return path.read_bytes()

    def path_of(self, sha: str) -> Path:
        """The file holding a blob, for streaming it without reading it whole (NotFound when it is missing)."""
        path = self._path(sha)
        if not path.exists():
            raise NotFound(f"blob {sha} is missing from the blob store")
        return path

    def exists(self, sha: str) -> bool:
        return self._path(sha).exists()

    def delete_unused(self, shas: Iterable[str], unused: Callable[[set[str]], set[str]]) -> set[str]:
        """Delete those of `shas` that no document uses (`unused`: the ledger's check, e.g.
        DocumentLedger.unreferenced_blobs); returns those deleted.

        A blob is shared by every document with the same bytes, so an upload of those bytes (another KB's, or a
        new version's) may store it and record its document while this runs. A plain check-then-delete could
        delete it just after that upload stored it and before its row was committed. So each blob first goes
        aside (renamed, atomically), `unused` is asked again, and only those still unused are deleted; the
        others are put back (the same bytes, whatever was stored there meanwhile). A writer that stored a blob
        and then committed its row checks that it is still there (`ensure_stored`): if this took it aside
        before the commit, the writer stores it again. One crashed between the two steps leaves the blob aside:
        the orphan sweep (`older_than`) puts it back."""
        aside: dict[str, Path] = {}
        for sha in unused({sha for sha in shas if sha}):
            moved = self.root / f"{_ASIDE_PREFIX}{sha}-{uuid.uuid4().hex}"
            try:
                os.rename(self._path(sha), moved)
            except FileNotFoundError:  # gone already (another deleter)
                continue
            aside[sha] = moved
        if not aside:
            return set()
        gone = unused(set(aside))
        for sha, moved in aside.items():
            if sha in gone:
                moved.unlink(missing_ok=True)
            else:
                os.replace(moved, self._path(sha))
        return gone

    def ensure_stored(self, sha: str, data: bytes) -> None:
        """Store `data` (whose digest is `sha`) again if it is missing: what a writer does once the row that uses
        it is committed, in case a deletion took the blob between the write and the commit (delete_unused)."""
        if not self.exists(sha):
            self.put(data)

    def put_back(self, sha: str, copy: Path) -> None:
        """Puts a blob back in place from a hard link (or copy) of its file, which stays where it is."""
        linked = copy.with_name(f".{sha}-{uuid.uuid4().hex}")
        try:
            os.link(copy, linked)
        except OSError:  # a file system without hard links
            shutil.copyfile(copy, linked)
        self._move_into_place(sha, linked)

    @contextmanager
    def pinned(self) -> Iterator[BlobPins]:
        """Pins for a writer that stores many blobs before it commits the rows that use them (a restore), where
        keeping every blob's bytes for `ensure_stored` would hold a whole archive in memory: see BlobPins."""
        folder = Path(tempfile.mkdtemp(dir=self.root, prefix=_PINS_PREFIX))
        try:
            yield BlobPins(self, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def older_than(self, age_s: float) -> Iterator[str]:
        """The digests of blobs last written more than `age_s` ago (the orphan sweep's candidates; a blob
        just stored for an upload whose row is not committed yet is younger). Leftover temp files of writes
        that died that long ago are removed on the way."""
        cutoff = time.time() - age_s
        for entry in self.root.glob(".incoming-*"):
            if _mtime(entry) < cutoff:
                entry.unlink(missing_ok=True)
        # Set aside by a deletion that died before it checked again (delete_unused): back in place, so that the
        # checks below decide about it.
        for entry in self.root.glob(f"{_ASIDE_PREFIX}*"):
            sha = entry.name.removeprefix(_ASIDE_PREFIX).split("-")[0]
            if _SHA256.match(sha) and _mtime(entry) < cutoff:
                self._move_into_place(sha, entry)
        # Pins of a writer that died (its rows committed or not): links only, the blobs stay where they are.
        for entry in self.root.glob(f"{_PINS_PREFIX}*"):
            if _mtime(entry) < cutoff:
                shutil.rmtree(entry, ignore_errors=True)
        for path in self.root.glob("??/??/*"):
            if _SHA256.match(path.name) and _mtime(path) < cutoff:
                yield path.name

    def _move_into_place(self, sha: str, source: Path) -> None:
        """Renames `source` to the blob's path, atomically: a reader sees the old blob or the new, never half."""
        target = self._path(sha)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, target)

    def _path(self, sha: str) -> Path:
        if not _SHA256.match(sha):
            raise InvalidInput("not a sha256 digest")
        return self.root / sha[:2] / sha[2:4] / sha


class BlobPins:
    """Each blob a writer stores through `put` is also hard-linked into the writer's own folder. A deletion
    (`BlobStore.delete_unused`) may take a blob between the write and the commit of the row that uses it; the
    link keeps its bytes, and `ensure_stored`, called once the rows are committed, puts back each one taken."""

    def __init__(self, store: BlobStore, folder: Path) -> None:
        self._store = store
        self._folder = folder

    def put(self, data: bytes) -> str:
        sha = self._store.put(data)
        pin = self._folder / sha
        if not pin.exists():
            try:
                os.link(self._store.path_of(sha), pin)
            # A deletion took it already, or the file system has no hard links: the bytes themselves, then.
            except (OSError, NotFound):
                pin.write_bytes(data)
        return sha

    def holds(self, sha: str) -> bool:
        """Whether this writer stored the blob: it is there for its rows, whatever a deletion did meanwhile."""
        return _SHA256.match(sha) is not None and (self._folder / sha).exists()

    def ensure_stored(self) -> None:
        for pin in self._folder.iterdir():
            if _SHA256.match(pin.name) and not self._store.exists(pin.name):
                self._store.put_back(pin.name, pin)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:  # deleted meanwhile
        return float("inf")
