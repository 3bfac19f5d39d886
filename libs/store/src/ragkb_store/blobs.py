"""Original uploads, stored content-addressed by sha256 in a local folder."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ragkb_core.errors import InvalidInput, NotFound, Unavailable

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# A blob a deletion has set aside while it checks again that no document uses it (BlobStore.delete_unused).
_ASIDE_PREFIX = ".deleting-"
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
            target = self._path(sha)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(temp_name, target)
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
                self._path(sha).parent.mkdir(parents=True, exist_ok=True)
                os.replace(entry, self._path(sha))
        for path in self.root.glob("??/??/*"):
            if _SHA256.match(path.name) and _mtime(path) < cutoff:
                yield path.name

    def _path(self, sha: str) -> Path:
        if not _SHA256.match(sha):
            raise InvalidInput("not a sha256 digest")
        return self.root / sha[:2] / sha[2:4] / sha


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:  # deleted meanwhile
        return float("inf")
