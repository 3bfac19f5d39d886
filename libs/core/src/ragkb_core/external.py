"""External knowledge bases: indexes managed elsewhere that ragkb only reads (issue 25).

Two kinds, told apart by `kind`:
- `qdrant`: a Qdrant collection another team writes. ragkb embeds the question with the model the collection was
  written with (the KB's `embedding_model`) and maps the points' payload keys onto passages (`fields`).
- `dify`: any HTTP endpoint of Dify's External Knowledge API (`POST {endpoint}/retrieval`), another ragkb
  included.

The configuration here is what the api stores on the KB and shows on GET; the credentials (a Qdrant API key, a
Dify Bearer key) are stored apart, sealed, and travel to the retriever only inside `ExternalTarget`, the wire
form of one search (ragkb_core.contracts.KbSearch.external)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, TypeAdapter, field_serializer, field_validator, model_validator

# A payload key as Qdrant's filters address it: dots would name nested fields, so a mapped key is one plain name.
PayloadKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
MAX_METADATA_KEYS = 32
HTTP_URL = r"^https?://[^\s/?#@]+(/[^\s?#]*)?$"


class QdrantFields(BaseModel):
    """Which payload keys of a point hold the passage's parts. `text` is required on a point (a point without
    it is skipped); the others are optional on a point and may be left unmapped (null)."""

    text: PayloadKey = "text"
    title: PayloadKey | None = "title"
    # Where the passage comes from (a path, a URL, a document name): the hit's `source_id`, and what groups a
    # collection's points into documents (a hit's `document_id` is derived from it).
    source: PayloadKey | None = "source"
    # Payload keys copied into each hit's `metadata` (string, integer and boolean values): the only keys a
    # search's `filters.metadata` can filter this KB on.
    metadata: list[PayloadKey] = Field(default_factory=list, max_length=MAX_METADATA_KEYS)
    # A payload key holding a list of strings, read as the passage's labels: what `filters.labels_*` and a key's
    # mandatory label filter match. Unmapped: the passages have no labels (a label filter matches none of them).
    labels: PayloadKey | None = None


class ExternalQdrantConfig(BaseModel):
    """A Qdrant collection: on a server (`url`), or — for tests and single-host setups — a qdrant-client
    local-mode storage folder (`path`, under the retriever's RAGKB_EXTERNAL__QDRANT_LOCAL_ROOTS)."""

    kind: Literal["qdrant"]
    url: str | None = Field(default=None, pattern=HTTP_URL, max_length=2048)
    path: str | None = Field(default=None, min_length=1, max_length=4096)
    collection: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,255}$")
    fields: QdrantFields = Field(default_factory=QdrantFields)
    # The dense vector's name; null: the collection's default (unnamed) vector.
    dense_vector: PayloadKey | None = None
    # A sparse vector of BM25 terms as ragkb's analyzer makes them (ragkb_analyzer: term ids, IDF modifier on
    # the collection), with the KB's `analyzer`; null: dense search only (a keyword-mode search finds nothing).
    sparse_vector: PayloadKey | None = None

    @model_validator(mode="after")
    def _one_location(self) -> ExternalQdrantConfig:
        if (self.url is None) == (self.path is None):
            raise ValueError("give the collection's `url` (a Qdrant server) or its `path` (local mode), not both")
        return self


class ExternalDifyConfig(BaseModel):
    """An endpoint of Dify's External Knowledge API: ragkb POSTs `{endpoint}/retrieval` with the Bearer key."""

    kind: Literal["dify"]
    # The API's base: `/retrieval` is appended (e.g. http://other-ragkb:8000 for another ragkb).
    endpoint: str = Field(pattern=HTTP_URL, max_length=2048)
    knowledge_id: str = Field(min_length=1, max_length=255)

    @field_validator("endpoint")
    @classmethod
    def _without_trailing_slash(cls, value: str) -> str:
        return re.sub(r"/+$", "", value)


ExternalConfig = Annotated[ExternalQdrantConfig | ExternalDifyConfig, Field(discriminator="kind")]
# Reads a stored configuration (the KB row's JSON) back.
CONFIG_ADAPTER: TypeAdapter[ExternalQdrantConfig | ExternalDifyConfig] = TypeAdapter(ExternalConfig)


class ExternalTarget(BaseModel):
    """api → retriever: an external KB as one search (or a probe) reaches it, its credential opened.

    The credential is a SecretStr so that no repr or log line shows it; it is written out only when the
    model is serialised to JSON for the internal API (behind the service token)."""

    config: ExternalConfig
    api_key: SecretStr | None = None

    @field_serializer("api_key", when_used="json")
    def _reveal_on_the_wire(self, value: SecretStr | None) -> str | None:
        return value.get_secret_value() if value is not None else None


class ExternalProbe(BaseModel):
    """retriever → api: an external KB answered. For a Qdrant collection, its size and its dense vector's
    dimension (checked against the embedding model's); for a Dify endpoint, that a search was accepted."""

    kind: Literal["qdrant", "dify"]
    points: int | None = None
    dense_size: int | None = None
