"""What a search's scope means for an external KB. Pure rules, unit-tested without a server.

A native KB applies the whole scope inside the engine. An external KB can apply only what its store can see:
- a Qdrant collection filters, inside the engine and before ranking, on the payload keys its `fields` map:
  `labels` (labels_any, labels_all and a key's mandatory labels) and `metadata` (equality);
- a Dify endpoint is sent metadata equality as its `metadata_condition`, and every record it answers is checked
  here again against the whole scope (labels, doc_type, metadata as its metadata reports them): a remote that
  ignores the condition, or reports no labels, can never widen what a caller sees — it returns fewer records.

Where a filter cannot be enforced at all the KB contributes nothing (`None`), never its unfiltered passages:
document ids (they name ragkb's own documents; an external passage's id is derived from its source), a label
filter on a collection without a labels key, a metadata key the collection does not map, a doc_type other than
`knowledge` (every external passage is knowledge)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ragkb_core.contracts import MetadataValue, ScopeFilter
from ragkb_core.external import QdrantFields
from ragkb_retriever.index.filters import FieldMatch, FilterSpec, scope_is_empty

EXTERNAL_DOC_TYPE = "knowledge"


def _searchable_at_all(scope: ScopeFilter) -> bool:
    """False for a scope no external passage can satisfy, whatever the store."""
    if scope_is_empty(scope) or scope.document_ids is not None:
        return False
    return scope.doc_types is None or EXTERNAL_DOC_TYPE in scope.doc_types


def _label_conditions(scope: ScopeFilter) -> list[tuple[str, ...]]:
    """Each tuple: a passage must hold at least one of these labels (labels_all gives one tuple per label)."""
    conditions = [tuple(labels) for labels in (scope.labels_any, scope.required_labels_any) if labels]
    return conditions + [(label,) for label in scope.labels_all or ()]


def qdrant_scope(scope: ScopeFilter, fields: QdrantFields) -> FilterSpec | None:
    """The scope as a filter on the collection's payload; None when the collection cannot enforce it."""
    if not _searchable_at_all(scope):
        return None
    labels = _label_conditions(scope)
    if labels and fields.labels is None:
        return None
    metadata = scope.metadata or {}
    if any(key not in fields.metadata for key in metadata):
        return None
    label_key = fields.labels or ""
    must = [FieldMatch(label_key, values) for values in labels]
    must += [FieldMatch(key, (value,)) for key, value in metadata.items()]
    return FilterSpec(must=tuple(must))


@dataclass(frozen=True)
class DifyScope:
    """What a Dify endpoint is asked (`condition`: metadata equality) and what every record it answers must
    show in its metadata (`admits`)."""

    labels: list[tuple[str, ...]] = field(default_factory=list)
    metadata: dict[str, MetadataValue] = field(default_factory=dict)

    def condition(self) -> dict[str, Any] | None:
        """Dify's `metadata_condition` for the equality filters with a value Dify's `is` compares as text."""
        sendable = {key: value for key, value in self.metadata.items() if not isinstance(value, bool)}
        if not sendable:
            return None
        conditions = [
            {"name": [key], "comparison_operator": "is", "value": str(value)} for key, value in sendable.items()
        ]
        return {"logical_operator": "and", "conditions": conditions}

    def admits(self, metadata: Mapping[str, Any]) -> bool:
        if metadata.get("doc_type", EXTERNAL_DOC_TYPE) != EXTERNAL_DOC_TYPE:
            return False
        reported = metadata.get("labels")
        labels = set(reported) if isinstance(reported, list) else set()
        if any(labels.isdisjoint(condition) for condition in self.labels):
            return False
        return all(_equal(metadata.get(key), value) for key, value in self.metadata.items())


def _equal(actual: Any, expected: MetadataValue) -> bool:
    """Equality as a native KB's filter has it: same type and value (True is not 1)."""
    return type(actual) is type(expected) and actual == expected


def dify_scope(scope: ScopeFilter) -> DifyScope | None:
    """The scope as a Dify endpoint is asked and its records checked; None when no record could be admitted."""
    if not _searchable_at_all(scope):
        return None
    return DifyScope(labels=_label_conditions(scope), metadata=dict(scope.metadata or {}))
