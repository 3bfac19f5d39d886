"""Who is calling and what they may do: API key format and hashing, roles, per-KB grants, search scope.

Pure rules, no I/O: the guard (ragkb_api.guards) and the service layer apply them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ragkb_core.contracts import DocType, MetadataValue, ScopeFilter
from ragkb_core.errors import Forbidden
from ragkb_store.knowledge_bases import kb_not_found
from ragkb_store.ledger import DocumentScope

Role = Literal["admin", "client"]
Permission = Literal["read", "write"]
# What a route needs, declared in its handler's `opt` (ragkb_http.access): "public" (no key), "caller" (any
# valid key; the service scopes the answer), "read"/"write" (that permission on the path's KB), "admin", and
# "dify" (any valid key, refused in the error shape of Dify's External Knowledge API).
Access = Literal["public", "caller", "read", "write", "admin", "dify"]
# Undeclared routes need an admin key: whatever is added later is closed until someone opens it on purpose.
DEFAULT_ACCESS: Access = "admin"
KEY_SCHEME = "rk"
PREFIX_BYTES = 6  # 12 hex characters: enough to find a row, and harmless to show
SECRET_BYTES = 32  # 256 bits from the OS's CSPRNG


@dataclass(frozen=True)
class NewKey:
    """A freshly generated key: `plaintext` is shown to its owner once and never stored."""

    plaintext: str
    prefix: str
    key_hash: str


@dataclass(frozen=True)
class SearchRestriction:
    """A key's mandatory search filter, in the shape of the public search `filters` (None: no restriction)."""

    labels_any: list[str] | None = None
    doc_types: list[DocType] | None = None


@dataclass(frozen=True)
class Caller:
    """The authenticated caller of one request."""

    key_id: str
    role: Role
    grants: Mapping[str, Permission] = field(default_factory=dict)
    restriction: SearchRestriction = field(default_factory=SearchRestriction)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def may(self, kb_id: str, permission: Permission) -> bool:
        """Admins may do anything to any KB; a client what its grant for that KB allows (write implies read)."""
        if self.is_admin:
            return True
        granted = self.grants.get(kb_id)
        return granted == "write" or (granted == "read" and permission == "read")

    def readable(self, kb_ids: Iterable[str]) -> list[str]:
        return [kb_id for kb_id in kb_ids if self.may(kb_id, "read")]

    @property
    def document_scope(self) -> DocumentScope:
        """The documents this key may see and touch: those its search filter lets a search find."""
        labels, doc_types = self.restriction.labels_any, self.restriction.doc_types
        return DocumentScope(
            labels_any=frozenset(labels) if labels is not None else None,
            doc_types=frozenset(doc_types) if doc_types is not None else None,
        )


def authorize(caller: Caller, needed: str, kb_id: str | None) -> None:
    """Raise unless `caller` may use a route that needs `needed` on the KB `kb_id` (from its path)."""
    if needed == "caller" or caller.is_admin:
        return
    if needed not in ("read", "write") or kb_id is None:
        raise Forbidden("this operation needs an admin key")
    if not caller.may(kb_id, "read"):
        raise kb_not_found(kb_id)
    if needed == "write" and not caller.may(kb_id, "write"):
        raise Forbidden(f"this key may read knowledge base {kb_id} but not change it")


def generate_key() -> NewKey:
    prefix = secrets.token_hex(PREFIX_BYTES)
    plaintext = f"{KEY_SCHEME}_{prefix}_{secrets.token_urlsafe(SECRET_BYTES)}"
    return NewKey(plaintext=plaintext, prefix=prefix, key_hash=hash_key(plaintext))


def hash_key(plaintext: str) -> str:
    # A single sha256 is enough here, unlike for passwords: every key we issue carries 256 random bits, so
    # a stolen hash cannot be reversed by guessing, and a slow hash (bcrypt, argon2) would only cost
    # latency on every request. (The bootstrap admin key is operator-chosen: it must be long and random.)
    return hashlib.sha256(plaintext.encode("utf-8")).hexdigest()


def key_prefix(plaintext: str) -> str | None:
    """The display/lookup prefix of a well-formed `rk_<prefix>_<secret>` key, else None."""
    scheme, _, rest = plaintext.partition("_")
    prefix, _, secret = rest.partition("_")
    if scheme != KEY_SCHEME or len(prefix) != 2 * PREFIX_BYTES or not secret:
        return None
    return prefix if all(c in "0123456789abcdef" for c in prefix) else None


def hashes_match(plaintext: str, key_hash: str) -> bool:
    # Constant time: how much of a hash matched must not show in the response time.
    return hmac.compare_digest(hash_key(plaintext), key_hash)


def bearer_token(authorization: str | None) -> str | None:
    """The credentials of an `Authorization: Bearer <key>` header, else None."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class SearchFilterFields(Protocol):
    """The filters of a search request (schemas.SearchFilters)."""

    @property
    def document_ids(self) -> list[str] | None: ...
    @property
    def labels_any(self) -> list[str] | None: ...
    @property
    def labels_all(self) -> list[str] | None: ...
    @property
    def doc_types(self) -> list[DocType] | None: ...
    @property
    def metadata(self) -> dict[str, MetadataValue] | None: ...


def search_scope(caller: Caller, filters: SearchFilterFields) -> ScopeFilter:
    """The request's filters ANDed with the caller's mandatory restriction: a request can narrow it, never
    widen it. doc_type is single-valued, so its AND is an intersection; labels are a list per passage, so the
    key's labels go to the engine as a second condition of their own."""
    required = caller.restriction
    return ScopeFilter(
        document_ids=filters.document_ids,
        labels_any=filters.labels_any,
        labels_all=filters.labels_all,
        doc_types=_intersect(filters.doc_types, required.doc_types),
        metadata=filters.metadata,
        required_labels_any=required.labels_any,
    )


def _intersect(requested: list[DocType] | None, allowed: list[DocType] | None) -> list[DocType] | None:
    if allowed is None:
        return requested
    if requested is None:
        return list(allowed)
    return [doc_type for doc_type in requested if doc_type in allowed]
