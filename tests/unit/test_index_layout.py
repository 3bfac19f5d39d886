"""A KB's layout on a Qdrant cluster: defaults from settings, fields a request names win, write consistency
within replication, and what ServerIndex asks Qdrant for (through a hand-written recording client over
qdrant-client's local mode, which ignores shard settings: no Qdrant server can run here)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from ragkb_core import ids
from ragkb_core.errors import InvalidInput
from ragkb_core.kb_settings import KbIndexLayout
from ragkb_core.settings import QdrantSettings
from ragkb_retriever.index.server import ServerIndex
from ragkb_retriever.settings import RetrieverSettings

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")
CLUSTER_DEFAULTS = KbIndexLayout(shard_number=2, replication_factor=2, write_consistency_factor=1)


class RecordingQdrant(QdrantClient):
    """Local mode that remembers each collection's layout and reports it back as a server would."""

    def __init__(self) -> None:
        super().__init__(location=":memory:")
        self.layouts: dict[str, dict[str, Any]] = {}

    def create_collection(self, collection_name: str, *args: Any, **kwargs: Any) -> bool:
        self.layouts[collection_name] = {
            key: kwargs.get(key) for key in ("shard_number", "replication_factor", "write_consistency_factor")
        }
        return super().create_collection(collection_name, *args, **kwargs)

    def get_collection(self, collection_name: str, **kwargs: Any) -> qm.CollectionInfo:
        info = super().get_collection(collection_name, **kwargs)
        for key, value in self.layouts.get(collection_name, {}).items():
            setattr(info.config.params, key, value)
        return info


def test_fields_left_out_take_the_defaults() -> None:
    asked = KbIndexLayout(replication_factor=3)
    assert asked.filled(CLUSTER_DEFAULTS) == KbIndexLayout(
        shard_number=2, replication_factor=3, write_consistency_factor=1
    )
    assert KbIndexLayout().filled(CLUSTER_DEFAULTS) == CLUSTER_DEFAULTS


def test_write_consistency_cannot_exceed_replication() -> None:
    with pytest.raises(ValidationError, match="cannot exceed replication_factor"):
        KbIndexLayout(replication_factor=2, write_consistency_factor=3)
    with pytest.raises(ValueError, match="cannot exceed replication_factor"):
        KbIndexLayout(write_consistency_factor=3).filled(CLUSTER_DEFAULTS)
    with pytest.raises(ValidationError):
        QdrantSettings(replication_factor=1, write_consistency_factor=2)


def test_the_defaults_come_from_the_retrievers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGKB_QDRANT__SHARD_NUMBER", "6")
    monkeypatch.setenv("RAGKB_QDRANT__REPLICATION_FACTOR", "2")
    monkeypatch.setenv("RAGKB_QDRANT__WRITE_CONSISTENCY_FACTOR", "2")
    monkeypatch.setenv("RAGKB_SERVICE_TOKEN", "t" * 40)
    layout = RetrieverSettings().qdrant.default_layout()
    assert layout == KbIndexLayout(shard_number=6, replication_factor=2, write_consistency_factor=2)


def test_a_kb_is_created_with_its_layout_and_keeps_it_through_reindexes() -> None:
    client = RecordingQdrant()
    index = ServerIndex(client, CLUSTER_DEFAULTS)
    applied = index.create_kb("kb1", dense_size=4, layout=KbIndexLayout(shard_number=4))
    assert applied == KbIndexLayout(shard_number=4, replication_factor=2, write_consistency_factor=1)
    first = ids.collection_name("kb1", 1)
    assert client.layouts[first] == applied.model_dump()
    assert index.create_kb("kb1", dense_size=4) == applied  # exists: reports the layout it has
    generation = index.create_generation("kb1", dense_size=8)
    assert client.layouts[ids.collection_name("kb1", generation)] == applied.model_dump()


def test_an_impossible_layout_is_refused_before_anything_is_created() -> None:
    client = RecordingQdrant()
    index = ServerIndex(client, KbIndexLayout(shard_number=1, replication_factor=1, write_consistency_factor=1))
    with pytest.raises(InvalidInput, match="cannot exceed replication_factor"):
        index.create_kb("kb1", dense_size=4, layout=KbIndexLayout(write_consistency_factor=2))
    assert client.layouts == {} and not index.kb_exists("kb1")
