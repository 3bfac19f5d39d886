"""API keys and access rules: key format and hashing, grants, the search scope a key is confined to, and the
key store (on a throwaway SQLite file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import select

from ragkb_api.access import (
    Caller,
    SearchRestriction,
    authorize,
    bearer_token,
    generate_key,
    hash_key,
    hashes_match,
    key_prefix,
    search_scope,
)
from ragkb_api.keys.schemas import ApiKeyCreate, ApiKeyPatch, KeySearchFilter
from ragkb_api.keys.service import ApiKeyService
from ragkb_api.paging import PageRequest
from ragkb_api.search.schemas import SearchFilters
from ragkb_api.search.service import SearchService
from ragkb_core.contracts import ScopeFilter
from ragkb_core.errors import Forbidden, InvalidInput, NotFound, Unauthorized
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import AuthSettings, DatabaseSettings, LimitSettings, RetrieverClientSettings
from ragkb_retriever.index.filters import FieldMatch, scope_filter, scope_is_empty
from ragkb_store.db.engine import build_engine, build_session_factory, migrate_to_head
from ragkb_store.db.models import ApiKey, KnowledgeBase

READER = Caller(key_id="k1", role="client", grants={"kb-a": "read", "kb-w": "write"})
ADMIN = Caller(key_id="k0", role="admin")


def test_a_generated_key_carries_its_prefix_and_only_its_hash_is_kept() -> None:
    key = generate_key()
    assert key.plaintext.startswith(f"rk_{key.prefix}_") and len(key.plaintext) > 50
    assert key_prefix(key.plaintext) == key.prefix
    assert key.key_hash == hash_key(key.plaintext) and key.plaintext not in key.key_hash
    assert hashes_match(key.plaintext, key.key_hash)
    assert not hashes_match(key.plaintext + "x", key.key_hash)
    assert generate_key().plaintext != key.plaintext


@pytest.mark.parametrize(
    "text", ["", "rk_", "rk_abc_secret", "xx_0123456789ab_secret", "rk_0123456789ab_", "rk_0123456789AB_s"]
)
def test_malformed_keys_have_no_prefix(text: str) -> None:
    assert key_prefix(text) is None


def test_a_secret_may_contain_the_separator() -> None:
    assert key_prefix("rk_0123456789ab_se_cr-et") == "0123456789ab"


@pytest.mark.parametrize(
    ("header", "token"),
    [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", None), ("Bearer", None), (None, None)],
)
def test_bearer_credentials(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_write_implies_read_and_admins_may_everything() -> None:
    assert READER.may("kb-a", "read") and not READER.may("kb-a", "write")
    assert READER.may("kb-w", "read") and READER.may("kb-w", "write")
    assert not READER.may("kb-other", "read")
    assert ADMIN.may("anything", "write")
    assert READER.readable(["kb-w", "kb-x", "kb-a"]) == ["kb-w", "kb-a"]


def test_an_unreadable_kb_and_an_unknown_one_get_the_same_not_found() -> None:
    with pytest.raises(NotFound) as ungranted:
        authorize(READER, "read", "kb-other")
    with pytest.raises(NotFound) as unknown:
        authorize(READER, "write", "no-such-kb")
    assert ungranted.value.detail.replace("kb-other", "X") == unknown.value.detail.replace("no-such-kb", "X")


def test_a_read_grant_cannot_write_and_clients_cannot_administer() -> None:
    authorize(READER, "read", "kb-a")
    with pytest.raises(Forbidden):
        authorize(READER, "write", "kb-a")
    for needed in ("admin", "something-new"):
        with pytest.raises(Forbidden):
            authorize(READER, needed, "kb-w")
    authorize(READER, "caller", None)
    authorize(ADMIN, "admin", None)


def test_a_key_filter_narrows_a_search_and_a_request_cannot_widen_it() -> None:
    caller = Caller("k", "client", {}, SearchRestriction(labels_any=["public"], doc_types=["knowledge"]))
    scope = search_scope(caller, SearchFilters(labels_any=["hr"], doc_types=["knowledge", "reference"]))
    assert scope == ScopeFilter(labels_any=["hr"], doc_types=["knowledge"], required_labels_any=["public"])
    assert search_scope(caller, SearchFilters(doc_types=["reference"])).doc_types == []
    open_scope = search_scope(READER, SearchFilters(document_ids=["d"], labels_all=["a", "b"], metadata={"year": 2024}))
    assert open_scope == ScopeFilter(document_ids=["d"], labels_all=["a", "b"], metadata={"year": 2024})


def test_labels_all_and_metadata_become_one_engine_condition_each() -> None:
    spec = scope_filter("kb", ScopeFilter(labels_all=["a", "b"], metadata={"team": "hr", "public": True}))
    assert FieldMatch("labels", ("a",)) in spec.must and FieldMatch("labels", ("b",)) in spec.must
    assert FieldMatch("metadata.team", ("hr",)) in spec.must and FieldMatch("metadata.public", (True,)) in spec.must


def test_the_engine_ands_the_key_labels_with_the_request_labels() -> None:
    spec = scope_filter("kb", ScopeFilter(labels_any=["hr"], required_labels_any=["public"]))
    assert FieldMatch("labels", ("hr",)) in spec.must and FieldMatch("labels", ("public",)) in spec.must
    assert scope_is_empty(ScopeFilter(required_labels_any=[]))


def test_the_bootstrap_key_must_be_long() -> None:
    with pytest.raises(ValidationError):
        AuthSettings(bootstrap_admin_key="short")  # type: ignore[arg-type]
    assert AuthSettings(bootstrap_admin_key="").bootstrap_admin_key is None  # type: ignore[arg-type]


@pytest.fixture
def keys(tmp_path: Path) -> ApiKeyService:
    engine = build_engine(DatabaseSettings(url=f"sqlite:///{tmp_path / 'keys.db'}"))
    migrate_to_head(engine)
    sessions = build_session_factory(engine)
    with sessions.begin() as session:
        session.add(KnowledgeBase(id="kb-a", name="a", embedding_model="m", analyzer_version="v"))
    return ApiKeyService(sessions, bootstrap_admin_key="b" * 40)


def test_keys_authenticate_until_revoked_and_the_secret_is_never_stored(keys: ApiKeyService) -> None:
    created = keys.create(
        ApiKeyCreate(name="app", grants={"kb-a": "read"}, search_filter=KeySearchFilter(labels_any=["public"]))
    )
    caller = keys.authenticate(created.key)
    assert (caller.role, dict(caller.grants), caller.restriction.labels_any) == ("client", {"kb-a": "read"}, ["public"])
    with keys._sessions() as session:  # what is stored at rest is the point here
        stored: Any = session.scalars(select(ApiKey)).one()
    assert created.key not in repr(vars(stored)) and stored.key_hash == hash_key(created.key)
    assert "key" not in keys.list(PageRequest()).items[0].model_dump()
    keys.revoke(created.id)
    with pytest.raises(Unauthorized):
        keys.authenticate(created.key)


@pytest.mark.parametrize("presented", [None, "", "rk_0123456789ab_nope", "b" * 39])
def test_missing_and_unknown_keys_are_unauthorized(keys: ApiKeyService, presented: str | None) -> None:
    with pytest.raises(Unauthorized):
        keys.authenticate(presented)


def test_the_bootstrap_key_is_an_admin(keys: ApiKeyService) -> None:
    assert keys.authenticate("b" * 40).is_admin


def test_grants_must_name_existing_kbs_and_can_be_replaced(keys: ApiKeyService) -> None:
    with pytest.raises(InvalidInput):
        keys.create(ApiKeyCreate(name="x", grants={"kb-missing": "read"}))
    with pytest.raises(InvalidInput):
        keys.create(ApiKeyCreate(name="x", role="admin", grants={"kb-a": "read"}))
    created = keys.create(ApiKeyCreate(name="x", search_filter=KeySearchFilter(doc_types=["knowledge"])))
    changed = keys.update(created.id, ApiKeyPatch(grants={"kb-a": "write"}))
    assert changed.grants == {"kb-a": "write"} and changed.search_filter == KeySearchFilter(doc_types=["knowledge"])
    cleared = keys.update(created.id, ApiKeyPatch.model_validate({"search_filter": None}))
    assert cleared.search_filter is None and cleared.grants == {"kb-a": "write"}
    assert keys.authenticate(created.key).may("kb-a", "write")


def test_a_search_reads_each_kb_as_the_orm_reads_it_and_sees_every_change(tmp_path: Path) -> None:
    """The search's lean KB read (one Core statement, settings memoised by their JSON text) gives the same
    KbSearch as the ORM read, and a changed setting is seen by the very next read."""
    engine = build_engine(DatabaseSettings(url=f"sqlite:///{tmp_path / 'kbs.db'}"))
    migrate_to_head(engine)
    sessions = build_session_factory(engine)
    tuned = {"top_k": 3, "rrf_k": 20, "dense_weight": 0.7, "fusion": "dbsf"}
    with sessions.begin() as session:
        session.add(KnowledgeBase(id="kb-a", name="a", embedding_model="m", analyzer_version="v"))
        session.add(
            KnowledgeBase(
                id="kb-b",
                name="b",
                embedding_model="m2",
                analyzer_version="v",
                retrieval=tuned,
                analyzer={"japanese": "char-bigram"},
            )
        )
    search = SearchService(sessions, RetrieverClient(RetrieverClientSettings(), None), LimitSettings())
    admin = Caller(key_id="k", role="admin")
    ids = ["kb-b", "kb-a"]
    assert search._searchable_kbs(ids, admin) == search._kb_searches(ids)
    with sessions.begin() as session:
        session.get(KnowledgeBase, "kb-b").retrieval = {**tuned, "top_k": 5}  # type: ignore[union-attr]
    assert search._searchable_kbs(ids, admin)[0].retrieval.top_k == 5
    assert search._searchable_kbs(ids, admin) == search._kb_searches(ids)
    with pytest.raises(NotFound):
        search._searchable_kbs(["kb-a"], Caller(key_id="c", role="client", grants={"kb-b": "read"}))
