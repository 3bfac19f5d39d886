"""What a search scope, a delete and a count select: the engine-neutral filters both adapters translate."""

from __future__ import annotations

import pytest

from ragkb_core import ids
from ragkb_core.contracts import ScopeFilter
from ragkb_core.errors import InvalidInput
from ragkb_retriever.index.filters import (
    FieldMatch,
    FilterSpec,
    count_filter,
    document_filter,
    narrowing_filter,
    scope_filter,
    scope_is_empty,
)
from ragkb_retriever.index.port import document_delete_filter
from ragkb_retriever.index.schema import generation_of, generations_of

KB = "3f2a"
IN_KB = FieldMatch("kb_id", (KB,))


def test_an_open_scope_still_confines_the_search_to_its_kb() -> None:
    assert scope_filter(KB, ScopeFilter()) == FilterSpec(must=(IN_KB,))


def test_what_narrows_a_scope_is_its_filter_less_the_kb() -> None:
    # An embedded shard holds one KB: its legs take only these conditions (none for an open scope).
    assert narrowing_filter(ScopeFilter()) is None
    scope = ScopeFilter(document_ids=["d1"], labels_all=["a"], metadata={"team": "hr"})
    narrowing = narrowing_filter(scope)
    assert narrowing is not None
    assert (IN_KB, *narrowing.must) == scope_filter(KB, scope).must
    assert IN_KB not in narrowing.must


def test_each_allow_list_becomes_a_match_any_on_its_field() -> None:
    scope = ScopeFilter(document_ids=["d1", "d2"], labels_any=["hr"], doc_types=["reference"])
    assert scope_filter(KB, scope) == FilterSpec(
        must=(
            IN_KB,
            FieldMatch("document_id", ("d1", "d2")),
            FieldMatch("labels", ("hr",)),
            FieldMatch("doc_type", ("reference",)),
        )
    )


@pytest.mark.parametrize(
    "scope",
    [ScopeFilter(document_ids=[]), ScopeFilter(labels_any=[]), ScopeFilter(doc_types=[], labels_any=["a"])],
)
def test_an_empty_allow_list_grants_nothing(scope: ScopeFilter) -> None:
    assert scope_is_empty(scope)


def test_absent_allow_lists_grant_everything() -> None:
    assert not scope_is_empty(ScopeFilter())
    assert not scope_is_empty(ScopeFilter(labels_any=["a"]))


def test_a_document_filter_can_keep_one_version_out() -> None:
    spec = document_filter(KB, "d1", except_version=3)
    assert spec.must == (IN_KB, FieldMatch("document_id", ("d1",)))
    assert spec.must_not == (FieldMatch("version", (3,)),)


def test_deleting_one_version_and_keeping_one_exclude_each_other() -> None:
    assert document_delete_filter(KB, "d1", None, 2).must[-1] == FieldMatch("version", (2,))
    with pytest.raises(InvalidInput):
        document_delete_filter(KB, "d1", 1, 2)


@pytest.mark.parametrize(
    ("document_id", "version", "expected"),
    [
        (None, None, (IN_KB,)),
        ("d1", None, (IN_KB, FieldMatch("document_id", ("d1",)))),
        ("d1", 2, (IN_KB, FieldMatch("document_id", ("d1",)), FieldMatch("version", (2,)))),
        (None, 2, (IN_KB, FieldMatch("version", (2,)))),
    ],
)
def test_count_narrows_from_kb_to_document_to_version(
    document_id: str | None, version: int | None, expected: tuple[FieldMatch, ...]
) -> None:
    assert count_filter(KB, document_id, version) == FilterSpec(must=expected)


def test_match_values_come_out_as_one_homogeneous_list() -> None:
    assert FieldMatch("version", (1, 2)).value_list() == [1, 2]
    assert FieldMatch("labels", ("a", "b")).value_list() == ["a", "b"]


def test_generations_are_recognised_by_the_shared_naming_scheme() -> None:
    assert generation_of(KB, ids.collection_name(KB, 12)) == 12
    assert generation_of(KB, ids.alias_name(KB)) is None
    assert generation_of(KB, ids.collection_name(KB + "0", 1)) is None
    assert generation_of(KB, f"{ids.alias_name(KB)}_gx") is None


def test_generations_are_listed_oldest_first_and_only_the_kbs_own() -> None:
    names = [ids.collection_name(KB, 10), "other", ids.collection_name(KB, 2), ids.collection_name("ff", 1)]
    assert generations_of(KB, names) == [ids.collection_name(KB, 2), ids.collection_name(KB, 10)]
