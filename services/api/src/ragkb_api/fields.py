"""Shared field types and bounds of the public API's request shapes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StringConstraints

MAX_LABELS = 50
MAX_LABEL_CHARS = 100
# Ids are 32-character hex (ragkb_core.ids); the bound leaves room and keeps hostile input small.
MAX_ID_CHARS = 64
MAX_KBS_PER_SEARCH = 50
MAX_DOCUMENT_IDS_PER_SEARCH = 1000
MAX_METADATA_FILTERS = 20
Id = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS)]


def _as_utc(value: datetime) -> datetime:
    # Times are stored in UTC; SQLite hands them back without their offset, and RFC 3339 (OpenAPI's
    # date-time) requires one.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


UtcDateTime = Annotated[datetime, AfterValidator(_as_utc)]
FilterLabel = Annotated[str, StringConstraints(min_length=1, max_length=MAX_LABEL_CHARS)]


# A document's metadata is stored, indexed with every chunk and sent back in every listing and hit: it is
# bounded before anything is stored (a 300-level nesting once made a KB's listing fail for everyone).
MAX_METADATA_DEPTH = 3
MAX_METADATA_KEYS = 64
MAX_METADATA_KEY_CHARS = 128
MAX_METADATA_LIST_ITEMS = 100
MAX_METADATA_BYTES = 16 * 1024


def _bounded_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    _check_metadata_value(metadata, depth=1)
    size = len(json.dumps(metadata, ensure_ascii=False).encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        raise ValueError(f"metadata takes {size} bytes as JSON; at most {MAX_METADATA_BYTES} are allowed")
    return metadata


def _check_metadata_value(value: Any, depth: int) -> None:
    if isinstance(value, dict):
        _check_metadata_object(value, depth)
    elif isinstance(value, list):
        if len(value) > MAX_METADATA_LIST_ITEMS:
            raise ValueError(f"metadata lists hold at most {MAX_METADATA_LIST_ITEMS} items")
        _check_nesting(value, depth)
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise ValueError("metadata values are strings, numbers, booleans, null, lists or objects")


def _check_metadata_object(value: dict[Any, Any], depth: int) -> None:
    if len(value) > MAX_METADATA_KEYS:
        raise ValueError(f"a metadata object has at most {MAX_METADATA_KEYS} keys")
    for key in value:
        if not isinstance(key, str) or not key or len(key) > MAX_METADATA_KEY_CHARS or "\x00" in key:
            raise ValueError(f"metadata keys are 1 to {MAX_METADATA_KEY_CHARS} characters, without NUL")
    _check_nesting(list(value.values()), depth)


def _check_nesting(children: list[Any], depth: int) -> None:
    for child in children:
        if isinstance(child, dict | list):
            if depth >= MAX_METADATA_DEPTH:
                raise ValueError(f"metadata nests at most {MAX_METADATA_DEPTH} levels of objects and lists")
            _check_metadata_value(child, depth + 1)
        else:
            _check_metadata_value(child, depth)


DocumentMetadata = Annotated[
    dict[str, Any],
    AfterValidator(_bounded_metadata),
    Field(
        description=(
            f"Free-form JSON object: at most {MAX_METADATA_KEYS} keys an object, {MAX_METADATA_DEPTH} levels of "
            f"nesting, {MAX_METADATA_LIST_ITEMS} items a list and {MAX_METADATA_BYTES} bytes in all"
        )
    ),
]
