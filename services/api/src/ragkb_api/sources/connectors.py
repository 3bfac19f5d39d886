"""The one place that turns a source's stored configuration into its connector."""

from __future__ import annotations

from pydantic import TypeAdapter

from ragkb_api.sources.base import Connector
from ragkb_api.sources.folder import FolderConnector, allowed_path
from ragkb_api.sources.git import GitConnector, checked_repository
from ragkb_api.sources.schemas import FolderConfig, GitConfig, SourceConfig, WebConfig
from ragkb_api.sources.web import CrawlLimits, WebConnector
from ragkb_core.settings import SourceSettings

CONFIG = TypeAdapter[FolderConfig | WebConfig | GitConfig](SourceConfig)


def check_config(config: FolderConfig | WebConfig | GitConfig, settings: SourceSettings) -> None:
    """Refuse (422) a source the server may not read: a folder or a local repository outside the roots, a
    repository over another transport."""
    if isinstance(config, FolderConfig):
        allowed_path(config.path, settings.folder_roots)
    elif isinstance(config, GitConfig):
        checked_repository(config.repository, settings.folder_roots)


def build_connector(
    config: FolderConfig | WebConfig | GitConfig, credentials: dict[str, str], settings: SourceSettings, max_bytes: int
) -> Connector:
    if isinstance(config, FolderConfig):
        return FolderConnector(config.path, settings.folder_roots, settings.max_items, max_bytes)
    if isinstance(config, WebConfig):
        limits = CrawlLimits(config.max_depth, config.max_pages, tuple(config.content_types), max_bytes)
        return WebConnector(config.start_url, limits, credentials, settings.fetch_timeout_s)
    repository = checked_repository(config.repository, settings.folder_roots)
    limits_git = (settings.max_items, max_bytes, settings.fetch_timeout_s)
    return GitConnector(repository, config.branch, config.paths, credentials, limits_git)
