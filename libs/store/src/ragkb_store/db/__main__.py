"""`python -m ragkb_store.db`: migrate the metadata database named by RAGKB_DATABASE__URL to the newest schema."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from ragkb_core.settings import SERVICE_SETTINGS_CONFIG, DatabaseSettings
from ragkb_store.db.engine import build_engine, migrate_to_head


class _MigrateSettings(BaseSettings):
    model_config = SERVICE_SETTINGS_CONFIG
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)


def main() -> None:
    engine = build_engine(_MigrateSettings().database)
    migrate_to_head(engine)
    engine.dispose()
    print("metadata database is at the newest schema")


if __name__ == "__main__":
    main()
