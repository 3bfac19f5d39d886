"""Request and response shapes of API keys, and a key's search filter."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ragkb_api.fields import MAX_LABELS, FilterLabel, Id, UtcDateTime
from ragkb_core.contracts import DocType

Role = Literal["admin", "client"]
Grants = dict[Id, Literal["read", "write"]]


class KeySearchFilter(BaseModel):
    """A key's mandatory search filter: ANDed into every search the key makes (same fields as `filters`)."""

    labels_any: list[FilterLabel] | None = Field(default=None, max_length=MAX_LABELS)
    doc_types: list[DocType] | None = Field(default=None, max_length=2)


class ApiKeyCreate(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    role: Role = "client"
    # KB id → "read" or "write" (write implies read). Client keys only: an admin sees every KB.
    grants: Grants = Field(default_factory=dict, max_length=1000)
    search_filter: KeySearchFilter | None = None


class ApiKeyPatch(BaseModel):
    """Replace a key's grants and/or its search filter; `"search_filter": null` removes the filter."""

    grants: Grants | None = Field(default=None, max_length=1000)
    search_filter: KeySearchFilter | None = None


class ApiKeyOut(BaseModel):
    id: str
    name: str
    role: Role
    # The key's non-secret part (`rk_<prefix>_…`), to recognise it; the secret is never shown again.
    prefix: str
    grants: Grants
    search_filter: KeySearchFilter | None
    created_at: UtcDateTime
    revoked_at: UtcDateTime | None


class ApiKeyCreated(ApiKeyOut):
    # Shown once, now: only its hash is stored.
    key: str
