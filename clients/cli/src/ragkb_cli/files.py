"""The local side of a sync: the folder walk, the ledger of what each file was, and hashing only what changed."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

Hasher = Callable[[Path], str]
HASH_CHUNK_BYTES = 1 << 20
LEDGER_VERSION = 1


@dataclass(frozen=True)
class LocalFile:
    """A regular file found under the synced folder; `source_id` is its path from there, with `/`."""

    source_id: str
    path: Path
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class LedgerEntry:
    mtime_ns: int
    size: int
    sha256: str


@dataclass
class Fingerprints:
    """What the folder holds now: an entry per readable file, the reason for each unreadable one."""

    entries: dict[str, LedgerEntry] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    hashed: int = 0


def walk(root: Path, skip: Iterable[Path] = ()) -> list[LocalFile]:
    """Every regular file under `root`, sorted by source id.

    Skipped: hidden files and folders (a leading dot: .git, .DS_Store), the paths in `skip` (the ledger's
    folder when it lies inside), links that lead out of `root`, and linked folders (their target is either
    outside or already walked where it really is, and never entering them rules out cycles)."""
    root = root.resolve()
    skipped = {path.resolve() for path in skip}
    found: list[LocalFile] = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        dirs[:] = [name for name in dirs if not name.startswith(".") and here / name not in skipped]
        for name in names:
            local = _local_file(root, here / name, skipped)
            if local is not None:
                found.append(local)
    return sorted(found, key=lambda local: local.source_id)


def _local_file(root: Path, path: Path, skipped: set[Path]) -> LocalFile | None:
    if path.name.startswith(".") or path in skipped:
        return None
    try:
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            return None
        stat = path.stat()
    except OSError:  # gone since the folder was listed, or a broken link: nothing to sync
        return None
    if not path.is_file():
        return None
    return LocalFile(source_id(root, path), path, stat.st_size, stat.st_mtime_ns)


def source_id(root: Path, path: Path) -> str:
    """The path relative to the synced folder with `/` and NFC, so the same tree gives the same ids on any OS."""
    return unicodedata.normalize("NFC", path.relative_to(root).as_posix())


def sha256_file(path: Path) -> str:
    """The file's sha256, read in chunks (never whole into memory)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint(
    files: Iterable[LocalFile], ledger: dict[str, LedgerEntry], hasher: Hasher = sha256_file
) -> Fingerprints:
    """Each file's sha256: the ledger's when its size and mtime are unchanged, otherwise hashed now."""
    result = Fingerprints()
    for local in files:
        known = ledger.get(local.source_id)
        if known is not None and (known.mtime_ns, known.size) == (local.mtime_ns, local.size):
            result.entries[local.source_id] = known
            continue
        try:
            digest = hasher(local.path)
        except OSError as exc:
            result.unreadable[local.source_id] = read_failure(exc)
            continue
        result.hashed += 1
        result.entries[local.source_id] = LedgerEntry(local.mtime_ns, local.size, digest)
    return result


def read_failure(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "the file vanished"
    return f"cannot read the file: {exc.strerror or exc}"


# -- the ledger ----------------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ragkb" / "sync"


def ledger_path(url: str, kb_id: str, root: Path, cache_dir: Path | None = None) -> Path:
    """One ledger per (server, KB, folder): the same folder synced to two KBs keeps two."""
    key = "\n".join((url.rstrip("/"), kb_id, str(root.resolve())))
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    return (cache_dir or default_cache_dir()) / f"{name}.json"


def load_ledger(path: Path) -> dict[str, LedgerEntry]:
    """The ledger's entries; an absent or unreadable ledger is empty (it is a cache: files are hashed again)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {sid: LedgerEntry(**entry) for sid, entry in raw["files"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def save_ledger(path: Path, entries: dict[str, LedgerEntry]) -> None:
    """Write the ledger whole or not at all: a temporary file in the same folder, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"version": LEDGER_VERSION, "files": {sid: asdict(entry) for sid, entry in sorted(entries.items())}}
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".ledger-", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(body, handle, ensure_ascii=False)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
