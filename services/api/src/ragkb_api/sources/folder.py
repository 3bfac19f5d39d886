"""A folder on the server (a mounted volume or a network share), read only under the allow-listed roots
(RAGKB_SOURCES__FOLDER_ROOTS): a path that resolves outside every root, through `..` or a symbolic link, is
refused when the source is made and skipped when it is listed."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from pathlib import Path

from ragkb_api.sources.base import KeepAlive, SourceItem, SourceUnreadable, bounded, check_alive
from ragkb_core.errors import InvalidInput


def allowed_path(path: str, roots: Sequence[Path]) -> Path:
    """The path, resolved, when it lies under one of `roots`; InvalidInput (422) otherwise."""
    if not Path(path).is_absolute():
        raise InvalidInput(f"folder path {path!r} must be absolute")
    resolved = Path(path).resolve()
    if not any(resolved == root.resolve() or root.resolve() in resolved.parents for root in roots):
        allowed = ", ".join(str(root) for root in roots) or "none (RAGKB_SOURCES__FOLDER_ROOTS is empty)"
        raise InvalidInput(f"folder path {path!r} is outside the folders this server may read: {allowed}")
    return resolved


class FolderConnector:
    checks_extensions = True

    def __init__(self, path: str, roots: Sequence[Path], max_items: int, max_bytes: int) -> None:
        self._root = allowed_path(path, roots)
        self._max_items = max_items
        self._max_bytes = max_bytes

    def listing(self, keep_alive: KeepAlive) -> AbstractContextManager[list[SourceItem]]:
        if not self._root.is_dir():
            raise SourceUnreadable(f"folder {self._root} does not exist or is not a folder")
        return nullcontext(bounded(self._items(keep_alive), self._max_items))

    def _items(self, keep_alive: KeepAlive) -> Iterator[SourceItem]:
        for path in sorted(self._root.rglob("*")):
            relative = path.relative_to(self._root)
            if any(part.startswith(".") for part in relative.parts) or not path.is_file():
                continue  # hidden files and folders (.git, .DS_Store) are never documents
            if self._root not in path.resolve().parents:
                continue  # a link out of the folder
            check_alive(keep_alive)
            yield file_item(path, relative.as_posix(), self._max_bytes)


def file_item(path: Path, key: str, max_bytes: int) -> SourceItem:
    """A file as an item: hashed as it is read (never whole in memory), refused past `max_bytes`."""
    stat = path.stat()
    modified = datetime.fromtimestamp(stat.st_mtime, UTC)
    if stat.st_size > max_bytes:
        problem = f"{stat.st_size} bytes, more than the {max_bytes} an upload may have"
        return SourceItem(key, "", path.read_bytes, path.name, modified_at=modified, problem=problem)
    with path.open("rb") as handle:
        sha256 = hashlib.file_digest(handle, "sha256").hexdigest()
    return SourceItem(key=key, sha256=sha256, read=path.read_bytes, filename=path.name, modified_at=modified)
