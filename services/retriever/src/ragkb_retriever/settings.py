from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings

from ragkb_core.settings import (
    SERVICE_SETTINGS_CONFIG,
    SERVICE_TOKEN_DESCRIPTION,
    AnalyzerSettings,
    EmbeddingSettings,
    HttpServerSettings,
    QdrantSettings,
)


class SearchSettings(BaseModel):
    # RRF constant in the paper's convention (score = Σ 1/(k + rank), rank from 1).
    rrf_k: int = Field(default=60, ge=1)
    # Each leg fetches top_k × this many candidates before fusion.
    candidate_multiplier: int = Field(default=7, ge=1)


class RetrieverSettings(BaseSettings):
    model_config = SERVICE_SETTINGS_CONFIG

    # Where the retriever listens (RAGKB_RETRIEVER__HOST, RAGKB_RETRIEVER__PORT); clients use RAGKB_RETRIEVER__URL.
    retriever: HttpServerSettings = Field(default_factory=lambda: HttpServerSettings(port=8001))
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    analyzer: AnalyzerSettings = Field(default_factory=AnalyzerSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
    service_token: SecretStr | None = Field(default=None, description=SERVICE_TOKEN_DESCRIPTION)
