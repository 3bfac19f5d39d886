"""What a search's scope means for an external KB (ragkb_retriever.external.scope): what a store cannot enforce
returns nothing, never more than the caller may see."""

from __future__ import annotations

import pytest

from ragkb_core.contracts import ScopeFilter
from ragkb_core.external import ExternalDifyConfig, ExternalQdrantConfig, ExternalTarget, QdrantFields
from ragkb_retriever.external.scope import dify_scope, qdrant_scope
from ragkb_retriever.index.filters import FieldMatch, FilterSpec

MAPPED = QdrantFields(labels="tags", metadata=["team", "year"])
UNMAPPED = QdrantFields()


def test_an_unfiltered_search_reads_the_whole_collection() -> None:
    assert qdrant_scope(ScopeFilter(), UNMAPPED) == FilterSpec(must=())


def test_label_and_metadata_filters_become_payload_conditions_on_the_mapped_keys() -> None:
    scope = ScopeFilter(labels_any=["hr", "it"], labels_all=["public"], metadata={"team": "hr"})
    assert qdrant_scope(scope, MAPPED) == FilterSpec(
        must=(FieldMatch("tags", ("hr", "it")), FieldMatch("tags", ("public",)), FieldMatch("team", ("hr",)))
    )


def test_a_keys_mandatory_labels_are_a_condition_of_their_own() -> None:
    spec = qdrant_scope(ScopeFilter(labels_any=["hr"], required_labels_any=["public"]), MAPPED)
    assert spec == FilterSpec(must=(FieldMatch("tags", ("hr",)), FieldMatch("tags", ("public",))))


@pytest.mark.parametrize(
    "scope",
    [
        ScopeFilter(required_labels_any=["public"]),  # a restricted key, and the collection maps no labels
        ScopeFilter(labels_all=["x"]),
        ScopeFilter(metadata={"team": "hr"}),  # a key the collection does not map
        ScopeFilter(document_ids=["0" * 32]),  # ragkb's own documents
        ScopeFilter(doc_types=["reference"]),  # external passages are knowledge
        ScopeFilter(labels_any=[]),  # an empty allow-list grants nothing
    ],
)
def test_a_filter_the_collection_cannot_enforce_returns_nothing(scope: ScopeFilter) -> None:
    assert qdrant_scope(scope, UNMAPPED) is None


def test_a_dify_endpoint_is_asked_for_metadata_equality_and_its_records_are_checked_again() -> None:
    allowed = dify_scope(ScopeFilter(required_labels_any=["public"], metadata={"team": "hr", "draft": False}))
    assert allowed is not None
    # Booleans are not sent (Dify's `is` compares text), but checked on every record.
    assert allowed.condition() == {
        "logical_operator": "and",
        "conditions": [{"name": ["team"], "comparison_operator": "is", "value": "hr"}],
    }
    assert allowed.admits({"labels": ["public"], "team": "hr", "draft": False})
    assert not allowed.admits({"labels": ["public"], "team": "hr", "draft": 0})  # False is not 0
    assert not allowed.admits({"labels": ["internal"], "team": "hr", "draft": False})
    assert not allowed.admits({"team": "hr", "draft": False})  # no labels reported: not admitted
    assert not allowed.admits({"labels": ["public"], "team": "hr", "draft": False, "doc_type": "reference"})


def test_document_ids_other_doc_types_and_empty_allow_lists_admit_no_dify_record() -> None:
    assert dify_scope(ScopeFilter(document_ids=["0" * 32])) is None
    assert dify_scope(ScopeFilter(doc_types=["reference"])) is None
    assert dify_scope(ScopeFilter(labels_any=[])) is None
    assert dify_scope(ScopeFilter(doc_types=["knowledge", "reference"])) is not None


def test_a_collection_is_given_by_url_or_by_path_not_both() -> None:
    with pytest.raises(ValueError, match="not both"):
        ExternalQdrantConfig(kind="qdrant", collection="c")
    with pytest.raises(ValueError, match="not both"):
        ExternalQdrantConfig(kind="qdrant", collection="c", url="http://q:6333", path="/srv/q")


def test_the_api_key_is_hidden_everywhere_but_on_the_internal_wire() -> None:
    target = ExternalTarget(
        config=ExternalDifyConfig(kind="dify", endpoint="http://other:8000/", knowledge_id="k"), api_key="s3cret"
    )
    assert "s3cret" not in repr(target) and "s3cret" not in str(target.model_dump())
    assert '"api_key":"s3cret"' in target.model_dump_json()
    assert target.config.endpoint == "http://other:8000"  # `/retrieval` is appended to it
