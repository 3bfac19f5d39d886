"""Edge has no aliases: a KB's alias is a pointer file `kb_<id>.alias` holding its collection's directory
name. Replacing the file atomically is what makes a generation switch atomic for readers and crashes."""

from __future__ import annotations

import os
from pathlib import Path

from ragkb_core import ids

ALIAS_SUFFIX = ".alias"


class AliasFiles:
    """Pointer files under one index root. Not locked: the caller serialises writes per KB."""

    def __init__(self, root: Path) -> None:
        self._root = root

    def read(self, kb_id: str) -> str | None:
        try:
            target = self._path(kb_id).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        return target or None

    def kb_ids(self) -> list[str]:
        """Every KB that has an alias under the root."""
        stems = [path.name.removesuffix(ALIAS_SUFFIX) for path in self._root.glob(f"*{ALIAS_SUFFIX}")]
        # The id follows the alias name's prefix; checked against ids.alias_name, the one naming scheme.
        return sorted(kb_id for stem in stems if ids.alias_name(kb_id := stem.partition("_")[2]) == stem)

    def write(self, kb_id: str, collection: str) -> None:
        """Point the alias at `collection`: readers see the old or the new target, never a torn file."""
        path = self._path(kb_id)
        temp = path.with_name(f".{path.name}.tmp")
        with temp.open("w", encoding="utf-8") as file:
            file.write(collection)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
        self._sync_root()

    def remove(self, kb_id: str) -> None:
        self._path(kb_id).unlink(missing_ok=True)
        self._sync_root()

    def _path(self, kb_id: str) -> Path:
        return self._root / f"{ids.alias_name(kb_id)}{ALIAS_SUFFIX}"

    def _sync_root(self) -> None:
        # The rename (or unlink) is durable only once the directory entry itself is on disk.
        fd = os.open(self._root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
