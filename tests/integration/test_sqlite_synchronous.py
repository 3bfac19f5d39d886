"""The SQLite durability setting reaches every connection the engine opens: `full` (the default) syncs the
write-ahead log at each commit, `normal` only at checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from sqlalchemy import text

from ragkb_core.settings import DatabaseSettings
from ragkb_store.db.engine import build_engine

Synchronous = Literal["full", "normal"]
# PRAGMA synchronous answers a number: 1 NORMAL, 2 FULL.
ANSWERS = {"full": 2, "normal": 1}


@pytest.mark.parametrize("level", ["full", "normal"])
def test_each_connection_gets_the_configured_synchronous_level(tmp_path: Path, level: Synchronous) -> None:
    engine = build_engine(DatabaseSettings(url=f"sqlite:///{tmp_path / 'ragkb.db'}", sqlite_synchronous=level))
    try:
        # Two connections at once: the pool opens a second one, which must get the pragma too.
        with engine.connect() as first, engine.connect() as second:
            assert first.execute(text("PRAGMA synchronous")).scalar() == ANSWERS[level]
            assert second.execute(text("PRAGMA synchronous")).scalar() == ANSWERS[level]
            assert first.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    finally:
        engine.dispose()


def test_the_default_keeps_every_commit_durable() -> None:
    assert DatabaseSettings().sqlite_synchronous == "full"
