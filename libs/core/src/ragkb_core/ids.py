"""Identifiers: opaque public ids, deterministic point ids, collection names."""

from __future__ import annotations

import re
import uuid

# Fixed namespace so that point ids are the same on every machine and in every run.
POINT_NAMESPACE = uuid.UUID("6b1f3c2e-8a44-5d0e-9b7a-2f4c1e9d7a10")


# What new_id() makes, the only form a KB, document or job id takes. Checked where ids arrive from another
# process (the retriever's internal API): there a KB id becomes part of a file name in the index.
ID_PATTERN = r"^[0-9a-f]{32}$"


def new_id() -> str:
    """A new opaque id for KBs, documents and jobs (32 hex characters)."""
    return uuid.uuid4().hex


def is_id(value: str) -> bool:
    return re.fullmatch(ID_PATTERN, value) is not None


def point_id(kb_id: str, source_id: str, version: int, ordinal: int) -> str:
    """Deterministic chunk id: re-running an ingest overwrites the same points instead of duplicating."""
    return str(uuid.uuid5(POINT_NAMESPACE, f"{kb_id}\x1f{source_id}\x1f{version}\x1f{ordinal}"))


def alias_name(kb_id: str) -> str:
    return f"kb_{kb_id}"


def collection_name(kb_id: str, generation: int) -> str:
    return f"kb_{kb_id}_g{generation}"
