"""External points and records as the payload of a native passage, so that an external KB's hits are ranked,
explained, reranked, merged and cited exactly as a native KB's are (ragkb_retriever.searching)."""

from __future__ import annotations

import uuid
from typing import Any

from ragkb_core.contracts import MetadataValue

# Hits of external KBs are told apart from ragkb's own documents by ids in a namespace of their own.
EXTERNAL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://ragkb.dev/external-knowledge-bases")
SOURCE_LINK_SCHEMES = ("http://", "https://")


def external_document_id(kb_id: str, source: str) -> str:
    """A stable 32-hex id for the document an external passage comes from: its source, within its KB."""
    return uuid.uuid5(EXTERNAL_NAMESPACE, f"{kb_id}\x00{source}").hex


def scalar_metadata(values: dict[str, Any]) -> dict[str, MetadataValue]:
    """The string, integer and boolean values (what a hit's metadata carries and a filter compares)."""
    return {key: value for key, value in values.items() if isinstance(value, str | int | bool)}


def string_list(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def passage_payload(
    kb_id: str,
    *,
    text: str,
    title: str,
    source: str,
    labels: list[str],
    metadata: dict[str, MetadataValue],
    heading_path: list[str] | None = None,
    page: int | None = None,
) -> dict[str, Any]:
    """A native passage's payload fields (ragkb_retriever.searching._hit reads them) for an external passage: one
    version, ordinal 0 (an external store keeps no document order ragkb could rely on), doc_type knowledge."""
    return {
        "document_id": external_document_id(kb_id, source),
        "source_id": source,
        "version": 1,
        "ordinal": 0,
        "text": text,
        "title": title,
        "heading_path": heading_path or [],
        "page": page,
        "labels": labels,
        "doc_type": "knowledge",
        "metadata": metadata,
    }


def source_link(source: str) -> str:
    """A citation's way back to an external passage: its source when that is a web address, else none (ragkb
    stores no original of it)."""
    return source if source.startswith(SOURCE_LINK_SCHEMES) else ""
