"""The collection schema both adapters create: vector names, payload indexes, generation names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from ragkb_core import ids

DENSE_VECTOR = "dense"
SPARSE_VECTOR = "bm25"
# A KB's second model's vectors (KbChunking.second_model): only in the collections of KBs that have one.
SECOND_VECTOR = "second"

PayloadIndexKind = Literal["keyword", "integer"]

# Every field a search scope, a delete or a count filters on; without an index each filter is a scan.
PAYLOAD_INDEXES: tuple[tuple[str, PayloadIndexKind], ...] = (
    ("kb_id", "keyword"),
    ("document_id", "keyword"),
    ("source_id", "keyword"),
    ("labels", "keyword"),
    ("doc_type", "keyword"),
    ("version", "integer"),
    ("ordinal", "integer"),
)

FIRST_GENERATION = 1


def generation_of(kb_id: str, name: str) -> int | None:
    """The generation number if `name` is one of the KB's collections, else None.

    Checked against `ids.collection_name` itself, so that no second copy of the naming scheme exists.
    """
    prefix = f"{ids.alias_name(kb_id)}_g"
    suffix = name.removeprefix(prefix)
    if suffix == name or not suffix.isdigit():
        return None
    generation = int(suffix)
    return generation if ids.collection_name(kb_id, generation) == name else None


def generations_of(kb_id: str, names: Iterable[str]) -> list[str]:
    """The KB's collection names among `names`, oldest generation first."""
    found = [(gen, name) for name in names if (gen := generation_of(kb_id, name)) is not None]
    return [name for _, name in sorted(found)]
