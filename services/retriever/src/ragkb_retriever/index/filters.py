"""Engine-neutral filters. Each adapter translates a `FilterSpec` into its engine's filter type, so the
rules of what a scope, a delete or a count selects are written (and unit-tested) once."""

from __future__ import annotations

from dataclasses import dataclass

from ragkb_core.contracts import ScopeFilter


@dataclass(frozen=True)
class FieldMatch:
    """The field holds any of `values` (for a list field: any element does)."""

    field: str
    values: tuple[str | int | bool, ...]

    def value_list(self) -> list[str] | list[int]:
        """The values as the homogeneous list that the engines' match-any conditions take."""
        strings = [value for value in self.values if isinstance(value, str)]
        return strings or [value for value in self.values if isinstance(value, int)]


@dataclass(frozen=True)
class FilterSpec:
    """Every `must` match holds and no `must_not` match does."""

    must: tuple[FieldMatch, ...]
    must_not: tuple[FieldMatch, ...] = ()


def kb_filter(kb_id: str) -> FilterSpec:
    return FilterSpec(must=(FieldMatch("kb_id", (kb_id,)),))


def scope_is_empty(scope: ScopeFilter) -> bool:
    """An empty allow-list grants nothing: the search must return nothing, not everything."""
    allow_lists = (scope.document_ids, scope.labels_any, scope.doc_types, scope.required_labels_any)
    return any(values is not None and not values for values in allow_lists)


def scope_filter(kb_id: str, scope: ScopeFilter) -> FilterSpec:
    """What one KB's search may see. Callers check `scope_is_empty` first."""
    narrowing = narrowing_filter(scope)
    return FilterSpec(must=(*kb_filter(kb_id).must, *(narrowing.must if narrowing else ())))


def narrowing_filter(scope: ScopeFilter) -> FilterSpec | None:
    """The conditions of `scope` beyond its KB (documents, labels, types, metadata); None when it has none."""
    optional = (
        ("document_id", scope.document_ids),
        ("labels", scope.labels_any),
        ("doc_type", scope.doc_types),
        ("labels", scope.required_labels_any),
    )
    matches = [FieldMatch(field, tuple(values)) for field, values in optional if values]
    matches += [FieldMatch("labels", (label,)) for label in scope.labels_all or ()]
    # Keys are validated by the api (letters, digits, _ and -), so the dotted path names one nested field.
    matches += [FieldMatch(f"metadata.{key}", (value,)) for key, value in (scope.metadata or {}).items()]
    return FilterSpec(must=tuple(matches)) if matches else None


def document_filter(
    kb_id: str,
    document_id: str,
    *,
    version: int | None = None,
    except_version: int | None = None,
) -> FilterSpec:
    """A document's points: all versions, one `version`, or all but `except_version`."""
    must = [*kb_filter(kb_id).must, FieldMatch("document_id", (document_id,))]
    if version is not None:
        must.append(FieldMatch("version", (version,)))
    must_not = () if except_version is None else (FieldMatch("version", (except_version,)),)
    return FilterSpec(must=tuple(must), must_not=must_not)


def count_filter(kb_id: str, document_id: str | None, version: int | None) -> FilterSpec:
    """Points of the KB, of one document, or of one version of one document."""
    if document_id is not None:
        return document_filter(kb_id, document_id, version=version)
    if version is not None:
        return FilterSpec(must=(*kb_filter(kb_id).must, FieldMatch("version", (version,))))
    return kb_filter(kb_id)


def ordinal_window_filter(kb_id: str, document_id: str, version: int, ordinals: range) -> FilterSpec:
    """The passages of one document version whose ordinals lie in `ordinals` (a short window)."""
    spec = document_filter(kb_id, document_id, version=version)
    return FilterSpec(must=(*spec.must, FieldMatch("ordinal", tuple(ordinals))))
