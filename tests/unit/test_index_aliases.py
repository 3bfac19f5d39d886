"""Edge's alias pointer files: what a reader sees, and what a crash can leave behind."""

from __future__ import annotations

from pathlib import Path

from ragkb_core import ids
from ragkb_retriever.index.edge_aliases import AliasFiles

KB = "9c1e"


def test_an_alias_points_at_the_collection_last_written(tmp_path: Path) -> None:
    aliases = AliasFiles(tmp_path)
    aliases.write(KB, ids.collection_name(KB, 1))
    aliases.write(KB, ids.collection_name(KB, 2))
    assert aliases.read(KB) == ids.collection_name(KB, 2)
    assert (tmp_path / f"{ids.alias_name(KB)}.alias").read_text() == ids.collection_name(KB, 2)


def test_a_missing_or_removed_alias_reads_as_none(tmp_path: Path) -> None:
    aliases = AliasFiles(tmp_path)
    assert aliases.read(KB) is None
    aliases.write(KB, ids.collection_name(KB, 1))
    aliases.remove(KB)
    aliases.remove(KB)
    assert aliases.read(KB) is None


def test_a_replacement_leaves_no_temporary_file_behind(tmp_path: Path) -> None:
    aliases = AliasFiles(tmp_path)
    for generation in range(1, 4):
        aliases.write(KB, ids.collection_name(KB, generation))
    assert [path.name for path in tmp_path.iterdir()] == [f"{ids.alias_name(KB)}.alias"]


def test_a_crash_before_the_rename_leaves_the_old_target(tmp_path: Path) -> None:
    aliases = AliasFiles(tmp_path)
    aliases.write(KB, ids.collection_name(KB, 1))
    # What a crash between writing the temporary file and os.replace leaves on disk.
    (tmp_path / f".{ids.alias_name(KB)}.alias.tmp").write_text(ids.collection_name(KB, 2))
    assert aliases.read(KB) == ids.collection_name(KB, 1)
