"""Issue, list, change and revoke API keys, and resolve a presented key to its caller."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.access import Caller, SearchRestriction, generate_key, hash_key, hashes_match, key_prefix
from ragkb_api.keys.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyOut, ApiKeyPatch, KeySearchFilter
from ragkb_api.loop_reads import LoopReads
from ragkb_api.paging import Page, PageRequest
from ragkb_core.errors import InvalidInput, NotFound, Unauthorized
from ragkb_core.ids import new_id
from ragkb_store.db.engine import engine_of, transaction
from ragkb_store.db.models import ApiKey, KnowledgeBase, utcnow

BOOTSTRAP_KEY_ID = "bootstrap"
# A row of _LIVE_KEY_BY_PREFIX, its columns by name.
KeyRow = Row[Any, Any, Any, Any, Any]
_KEYS = ApiKey.__table__.c
# What a presented key is checked against and its caller made of, by its prefix (unique), for keys not revoked.
# Read on every request, never cached: a revocation or a grant change applies to the very next request, on
# every api replica. A Core statement built once, not an ORM query (ragkb_store.db.engine.engine_of).
_LIVE_KEY_BY_PREFIX = select(_KEYS.id, _KEYS.role, _KEYS.key_hash, _KEYS.grants, _KEYS.search_filter).where(
    _KEYS.prefix == bindparam("prefix"), _KEYS.revoked_at.is_(None)
)


class ApiKeyService:
    """Issues, lists, changes and revokes API keys, and resolves a presented key to its caller."""

    def __init__(
        self, sessions: sessionmaker[Session], bootstrap_admin_key: str | None, reads: LoopReads | None = None
    ) -> None:
        self._sessions = sessions
        self._engine = engine_of(sessions)
        # The async guard's read of the key (no thread hand-off on SQLite).
        self._reads = reads or LoopReads(self._engine)
        # Kept hashed in memory only, and compared like any other key.
        self._bootstrap_hash = hash_key(bootstrap_admin_key) if bootstrap_admin_key else None

    def authenticate(self, presented: str | None) -> Caller:
        """The caller of a presented key, for a sync caller (it reads the database in this thread)."""
        plaintext = _required(presented)
        bootstrap = self._bootstrap_caller(plaintext)
        if bootstrap is not None:
            return bootstrap
        return _caller_of_live(self._find_live(plaintext))

    async def authenticate_async(self, presented: str | None) -> Caller:
        """`authenticate` on the event loop: the key's read through LoopReads."""
        plaintext = _required(presented)
        bootstrap = self._bootstrap_caller(plaintext)
        if bootstrap is not None:
            return bootstrap
        prefix = key_prefix(plaintext)
        rows = await self._reads.rows(_LIVE_KEY_BY_PREFIX, {"prefix": prefix}) if prefix is not None else []
        return _caller_of_live(_matching(plaintext, rows[0] if rows else None))

    def _bootstrap_caller(self, presented: str) -> Caller | None:
        if self._bootstrap_hash is not None and hashes_match(presented, self._bootstrap_hash):
            return Caller(key_id=BOOTSTRAP_KEY_ID, role="admin")
        return None

    def create(self, data: ApiKeyCreate) -> ApiKeyCreated:
        new = generate_key()
        with transaction(self._sessions) as session:
            _check_key_fields(session, data.role, data.grants, data.search_filter)
            key = ApiKey(
                id=new_id(),
                name=data.name,
                role=data.role,
                prefix=new.prefix,
                key_hash=new.key_hash,
                grants=dict(data.grants),
                search_filter=data.search_filter.model_dump() if data.search_filter else None,
            )
            session.add(key)
            session.flush()
            return ApiKeyCreated(**_api_key_out(key).model_dump(), key=new.plaintext)

    def name_of(self, key_id: str) -> str | None:
        with self._sessions() as session:
            return session.scalar(select(ApiKey.name).where(ApiKey.id == key_id))

    def list(self, page: PageRequest) -> Page[ApiKeyOut]:
        query = select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)
        with self._sessions() as session:
            total = session.scalar(select(func.count()).select_from(ApiKey)) or 0
            keys = session.scalars(query.limit(page.limit).offset(page.offset))
            return Page([_api_key_out(key) for key in keys], total, page)

    def update(self, key_id: str, patch: ApiKeyPatch) -> ApiKeyOut:
        changes = patch.model_fields_set
        if not changes:
            raise InvalidInput("nothing to change: give grants and/or search_filter")
        with transaction(self._sessions) as session:
            key = _load_api_key(session, key_id)
            grants = patch.grants if "grants" in changes and patch.grants is not None else key.grants
            search_filter = patch.search_filter if "search_filter" in changes else _key_filter(key)
            _check_key_fields(session, key.role, grants, search_filter)
            key.grants = dict(grants)
            key.search_filter = search_filter.model_dump() if search_filter else None
            session.flush()
            return _api_key_out(key)

    def revoke(self, key_id: str) -> None:
        with transaction(self._sessions) as session:
            key = _load_api_key(session, key_id)
            key.revoked_at = key.revoked_at or utcnow()

    def _find_live(self, presented: str) -> KeyRow | None:
        prefix = key_prefix(presented)
        if prefix is None:
            return None
        with self._engine.connect() as connection:
            key = connection.execute(_LIVE_KEY_BY_PREFIX, {"prefix": prefix}).one_or_none()
        return _matching(presented, key)


def _required(presented: str | None) -> str:
    if presented is None:
        raise Unauthorized("send an API key: `Authorization: Bearer <key>`")
    return presented


def _matching(presented: str, key: KeyRow | None) -> KeyRow | None:
    """The live key row found by the presented key's prefix, if the whole key matches its hash."""
    if key is None or not hashes_match(presented, key.key_hash):
        return None
    return key


def _caller_of_live(key: KeyRow | None) -> Caller:
    if key is None:
        # One answer for malformed, unknown and revoked keys: nothing to learn by trying.
        raise Unauthorized("the API key is not valid")
    return _caller_of_row(key)


def _check_key_fields(
    session: Session, role: str, grants: dict[str, Any], search_filter: KeySearchFilter | None
) -> None:
    if role == "admin" and (grants or search_filter):
        raise InvalidInput("grants and search_filter apply to client keys; an admin key sees every KB")
    known = set(session.scalars(select(KnowledgeBase.id).where(KnowledgeBase.id.in_(list(grants)))))
    unknown = sorted(set(grants) - known)
    if unknown:
        raise InvalidInput(f"grants name unknown knowledge bases: {', '.join(unknown)}", unknown=unknown)


def _load_api_key(session: Session, key_id: str) -> ApiKey:
    key = session.get(ApiKey, key_id)
    if key is None:
        raise NotFound(f"API key {key_id} does not exist")
    return key


def _key_filter(key: ApiKey) -> KeySearchFilter | None:
    return KeySearchFilter.model_validate(key.search_filter) if key.search_filter is not None else None


def _caller_of_row(key: KeyRow) -> Caller:
    """The caller of a `_LIVE_KEY_BY_PREFIX` row."""
    search_filter = key.search_filter
    restriction = KeySearchFilter.model_validate(search_filter) if search_filter is not None else KeySearchFilter()
    return Caller(
        key_id=key.id,
        role="admin" if key.role == "admin" else "client",
        grants=dict(key.grants or {}),
        restriction=SearchRestriction(labels_any=restriction.labels_any, doc_types=restriction.doc_types),
    )


def _api_key_out(key: ApiKey) -> ApiKeyOut:
    return ApiKeyOut(
        id=key.id,
        name=key.name,
        role="admin" if key.role == "admin" else "client",
        prefix=key.prefix,
        grants=dict(key.grants),
        search_filter=_key_filter(key),
        created_at=key.created_at,
        revoked_at=key.revoked_at,
    )
