"""Shared field types and bounds of the public API's request shapes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

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
