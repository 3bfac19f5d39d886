"""The retriever's vector index: the `VectorIndex` port and its two adapters, chosen by `build_index`."""

from __future__ import annotations

from ragkb_core.settings import QdrantSettings
from ragkb_retriever.index.port import IndexHit, IndexPoint, LegResults, VectorIndex

__all__ = ["IndexHit", "IndexPoint", "LegResults", "VectorIndex", "build_index"]


def build_index(settings: QdrantSettings) -> VectorIndex:
    """Qdrant Edge in-process when no URL is set (the embedded default), else the Qdrant server there.

    The only place that names the concrete adapters; each is imported only when chosen, so that a
    server deployment never loads the Edge library.
    """
    if settings.url is None:
        from ragkb_retriever.index.edge import EdgeIndex

        return EdgeIndex(settings)
    from qdrant_client import QdrantClient

    from ragkb_retriever.index.server import ServerIndex

    return ServerIndex(QdrantClient(url=settings.url, api_key=settings.api_key), settings.default_layout())
