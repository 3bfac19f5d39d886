"""`python -m ragkb_models.prepare`: convert and build the configured embedding model into the cache now,
so that the services that load it start in seconds (run by `make run` before the services start)."""

from __future__ import annotations

import time

from pydantic import Field
from pydantic_settings import BaseSettings

from ragkb_core.settings import SERVICE_SETTINGS_CONFIG, EmbeddingSettings
from ragkb_models.embedder import load_embedder


class _PrepareSettings(BaseSettings):
    model_config = SERVICE_SETTINGS_CONFIG
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)


def main() -> None:
    settings = _PrepareSettings().embedding
    started = time.perf_counter()
    embedder = load_embedder(settings)
    embedder.embed_query("warm-up")
    seconds = time.perf_counter() - started
    print(f"embedding model {settings.model} ({settings.backend}) ready in {settings.cache_dir} ({seconds:.1f} s)")


if __name__ == "__main__":
    main()
