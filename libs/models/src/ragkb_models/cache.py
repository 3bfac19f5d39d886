"""Build-once artefacts in the model cache folder.

Every artefact (a folder or a single file) is written under a temporary name and renamed into place, so a
reader never sees a half-written one. A JSON marker written last records what the artefact was built from
and the size of each file; an artefact whose marker is missing, stale or contradicted by the files on disk
is rebuilt. A lock file serialises builders, because the worker and the retriever may start together."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MARKER_NAME = ".ragkb-build.json"

logger = logging.getLogger(__name__)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def build_lock(cache_dir: Path, name: str) -> Iterator[None]:
    cache_dir.mkdir(parents=True, exist_ok=True)
    with (cache_dir / f".{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def folder_is_complete(folder: Path, provenance: Mapping[str, Any]) -> bool:
    marker = _read_json(folder / MARKER_NAME)
    if marker is None or marker.get("provenance") != dict(provenance):
        return False
    return _sizes_match(folder, marker.get("files", {}))


def build_folder(target: Path, provenance: Mapping[str, Any], write: Callable[[Path], None]) -> None:
    """Run `write(tmp)` into a temporary sibling folder, mark it complete and move it to `target`."""
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex}")
    try:
        write(tmp)
        files = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
        _write_json(tmp / MARKER_NAME, {"provenance": dict(provenance), "files": files})
        _replace_folder(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cached_folder(cache_dir: Path, name: str, provenance: Mapping[str, Any], write: Callable[[Path], None]) -> Path:
    """The folder `name` in the cache, built by `write` unless a complete one of this provenance is there: one
    builder at a time across processes (a process that waited for another's build finds it done)."""
    target = cache_dir / name
    if folder_is_complete(target, provenance):
        return target
    with build_lock(cache_dir, name):
        if not folder_is_complete(target, provenance):
            started = time.perf_counter()
            build_folder(target, provenance, write)
            logger.info("built %s in %.1f s", target, time.perf_counter() - started)
    return target


def _replace_folder(tmp: Path, target: Path) -> None:
    # A directory cannot be renamed over a non-empty one: move the stale one aside first, then delete it.
    if target.exists():
        stale = target.with_name(f".{target.name}.stale-{uuid.uuid4().hex}")
        target.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
    tmp.rename(target)


def file_is_complete(path: Path, provenance: Mapping[str, Any]) -> bool:
    marker = _read_json(_file_marker(path))
    if marker is None or marker.get("provenance") != dict(provenance):
        return False
    return _sizes_match(path.parent, {path.name: marker.get("bytes")})


def build_file(target: Path, provenance: Mapping[str, Any], write: Callable[[Path], object]) -> None:
    """Run `write(tmp)` into a temporary sibling file, move it to `target`, then write its marker."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex}")
    try:
        write(tmp)
        size = tmp.stat().st_size
        # Drop the old marker first: a crash between the two writes must leave the file unmarked.
        _file_marker(target).unlink(missing_ok=True)
        os.replace(tmp, target)
        _write_json(_file_marker(target), {"provenance": dict(provenance), "bytes": size})
    finally:
        tmp.unlink(missing_ok=True)


def _file_marker(path: Path) -> Path:
    return path.with_name(path.name + ".build.json")


def _sizes_match(root: Path, sizes: Mapping[str, Any]) -> bool:
    if not sizes:
        return False
    for name, size in sizes.items():
        path = root / name
        if not path.is_file() or path.stat().st_size != size:
            return False
    return True


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _write_json(path: Path, value: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
