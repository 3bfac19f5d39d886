"""Identifiers: opaque public ids, deterministic point ids, collection names."""

from __future__ import annotations

import hashlib
import re
import secrets
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


def new_secret() -> str:
    """A generated secret (the bootstrap admin key, the internal service token): 32 random bytes, URL-safe, and
    never starting with "-". One in 64 of plain token_urlsafe does, and a command line then takes it for an
    option: `ragkb --key -Xy…` fails with "expected one argument"."""
    while (secret := secrets.token_urlsafe(32)).startswith("-"):
        pass
    return secret


# A chunk's id in an embedded (Edge) index is a 64-bit number: the engine hands a number back as a Python int,
# but builds a uuid.UUID for every UUID id it returns, per candidate of each leg (a hybrid search of 700
# candidates a leg at 100,000 points: 22.5 ms with UUID ids, 20.0 with numbers; bench/point_ids.py). Outside the
# index a numbered id is UUID-shaped text, so that `chunk_id` keeps its form: this prefix, then the number's 16
# hex digits. The prefix's third group, 8000, never occurs in the older ids (uuid5: theirs starts with 5), which
# are still read wherever an index holds them, and still written where it does (`numbered=False`;
# VectorIndex.numbered_point_ids).
NUMBERED_PREFIX = "00000000-0000-8000-"
_PREFIX_LENGTH = len(NUMBERED_PREFIX)


def point_id(kb_id: str, source_id: str, version: int, ordinal: int, *, numbered: bool = True) -> str:
    """Deterministic chunk id: re-running an ingest overwrites the same points instead of duplicating.

    64 bits per id: two chunks of one KB share one with a probability of about n² / 2⁶⁵ (n = 10 million:
    3 in a million)."""
    key = f"{kb_id}\x1f{source_id}\x1f{version}\x1f{ordinal}"
    if not numbered:
        return str(uuid.uuid5(POINT_NAMESPACE, key))
    return numbered_point_id(int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big"))


def numbered_point_id(number: int) -> str:
    """The text of the index's point number `number` (0 ≤ number < 2⁶⁴). Every candidate of a search's legs is
    named by it (1,400 of a hybrid top-100 search): its 16 hex digits from the bytes, ~0.6 µs against ~1 µs for a
    format string (measured in process)."""
    digits = number.to_bytes(8, "big").hex()
    return NUMBERED_PREFIX + digits[:4] + "-" + digits[4:]


def is_numbered(point_id: str) -> bool:
    """Whether `point_id` is a numbered id (`point_id(..., numbered=True)`), not an older UUID one."""
    return point_id.startswith(NUMBERED_PREFIX)


def engine_point_id(point_id: str) -> int | str:
    """What an index is given for a point id: a numbered id's number, an older id's UUID text as it is."""
    if is_numbered(point_id):
        return int(point_id[_PREFIX_LENGTH : _PREFIX_LENGTH + 4] + point_id[_PREFIX_LENGTH + 5 :], 16)
    return point_id


def point_id_text(engine_id: int | str | uuid.UUID) -> str:
    """A point id as an index returned it (a number, a UUID or its text), as the text the rest of ragkb uses."""
    return numbered_point_id(engine_id) if isinstance(engine_id, int) else str(engine_id)


def alias_name(kb_id: str) -> str:
    return f"kb_{kb_id}"


def collection_name(kb_id: str, generation: int) -> str:
    return f"kb_{kb_id}_g{generation}"
