"""`python -m ragkb_models.prepare`: convert and build the configured embedding model into the cache now,
so that the services that load it start in seconds (run by `make run` before the services start, and by the
image build with `--warm-up`)."""

from __future__ import annotations

import argparse
import time

from pydantic import Field
from pydantic_settings import BaseSettings

from ragkb_core.settings import SERVICE_SETTINGS_CONFIG, EmbeddingSettings
from ragkb_models.embedder import build_embedder_files, load_embedder


class _PrepareSettings(BaseSettings):
    model_config = SERVICE_SETTINGS_CONFIG
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    # The services load the model right after `make run` prepares it, and fail their start if it does not
    # load: loading it here too only cost every start seconds. An image build has no such next step.
    parser.add_argument("--warm-up", action="store_true", help="also load the model and embed a query")
    warm_up = parser.parse_args().warm_up
    settings = _PrepareSettings().embedding
    started = time.perf_counter()
    if warm_up or not build_embedder_files(settings):
        load_embedder(settings).embed_query("warm-up")
    seconds = time.perf_counter() - started
    print(f"embedding model {settings.model} ({settings.backend}) ready in {settings.cache_dir} ({seconds:.1f} s)")


if __name__ == "__main__":
    main()
