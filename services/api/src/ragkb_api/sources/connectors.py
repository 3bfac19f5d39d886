"""The one place that turns a source's stored configuration into its connector."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import TypeAdapter

from ragkb_api.sources.base import Connector
from ragkb_api.sources.folder import FolderConnector, allowed_path
from ragkb_api.sources.git import GitConnector, checked_repository
from ragkb_api.sources.s3 import Bucket, KnownObject, S3Connector
from ragkb_api.sources.schemas import AnyConfig, FolderConfig, GitConfig, S3Config, SourceConfig, WebConfig
from ragkb_api.sources.web import CrawlLimits, WebConnector
from ragkb_core.settings import SourceSettings

CONFIG = TypeAdapter[AnyConfig](SourceConfig)


def check_config(config: AnyConfig, settings: SourceSettings) -> None:
    """Refuse (422) a source the server may not read: a folder or a local repository outside the roots, a
    repository over another transport."""
    if isinstance(config, FolderConfig):
        allowed_path(config.path, settings.folder_roots)
    elif isinstance(config, GitConfig):
        checked_repository(config.repository, settings.folder_roots)


def build_connector(
    config: AnyConfig,
    credentials: dict[str, str],
    settings: SourceSettings,
    max_bytes: int,
    known: Mapping[str, KnownObject],
) -> Connector:
    """The connector of a source; `known`: the ETag and sha256 of each item as the last run stored it (a
    bucket downloads only the objects whose ETag changed)."""
    if isinstance(config, FolderConfig):
        return FolderConnector(config.path, settings.folder_roots, settings.max_items, max_bytes)
    if isinstance(config, WebConfig):
        limits = CrawlLimits(config.max_depth, config.max_pages, tuple(config.content_types), max_bytes)
        return WebConnector(config.start_url, limits, credentials, settings.fetch_timeout_s)
    if isinstance(config, S3Config):
        bucket = Bucket(config.bucket, config.prefix, config.endpoint_url, config.region)
        return S3Connector(bucket, credentials, known, (settings.max_items, max_bytes, settings.fetch_timeout_s))
    repository = checked_repository(config.repository, settings.folder_roots)
    limits_git = (settings.max_items, max_bytes, settings.fetch_timeout_s)
    return GitConnector(repository, config.branch, config.paths, credentials, limits_git)
