from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings

from ragkb_api.console.sessions import ConsoleSettings
from ragkb_api.rate_limit import RateLimitSettings
from ragkb_core.settings import (
    SERVICE_SETTINGS_CONFIG,
    SERVICE_TOKEN_DESCRIPTION,
    AuthSettings,
    BlobSettings,
    DatabaseSettings,
    EmbeddingSettings,
    HttpServerSettings,
    JobSettings,
    LimitSettings,
    LogSettings,
    MetricsSettings,
    RedisSettings,
    RetrieverClientSettings,
    SourceSettings,
)


class ApiSettings(BaseSettings):
    model_config = SERVICE_SETTINGS_CONFIG

    # Where the api listens (RAGKB_API__HOST, RAGKB_API__PORT).
    api: HttpServerSettings = Field(default_factory=HttpServerSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    blobs: BlobSettings = Field(default_factory=BlobSettings)
    retriever: RetrieverClientSettings = Field(default_factory=RetrieverClientSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    # Read, never loaded (the api runs no model): which embedding models a re-index may choose.
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings)
    # Browser sessions of the admin console (/console): how long they last.
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    # Sources the KBs read themselves (connectors) and their schedules.
    sources: SourceSettings = Field(default_factory=SourceSettings)
    service_token: SecretStr | None = Field(default=None, description=SERVICE_TOKEN_DESCRIPTION)
    # Log lines: console or JSON (RAGKB_LOG__FORMAT), and their level.
    log: LogSettings = Field(default_factory=LogSettings)
    # GET /metrics (RAGKB_METRICS__ENABLED, RAGKB_METRICS__TOKEN).
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
