"""What every connector answers: the items of its source, each with a stable key, a checksum of its content
and a way to read it. The run (ragkb_api.sources.runner) plans them against the KB with the manifest sync's
checksum comparison, so a connector never decides what changed.

A connector lists inside a context (`listing`): a Git clone lives in a temporary folder until the run has read
what it needs. `keep_alive` is called as the listing advances: it renews the run's lease, and answers False
when the run must stop (the lease was lost, or the api is stopping)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from ragkb_core.errors import RagkbError

KeepAlive = Callable[[], bool]


class SourceUnreadable(RagkbError):
    """The source as a whole cannot be read (the folder is gone, the site or the repository does not answer):
    the run fails and no document is touched."""

    status = 502
    title = "Source unreadable"


class RunStopped(Exception):
    """The run lost its lease or the api is stopping: it ends without changing anything more."""


@dataclass(frozen=True)
class SourceItem:
    """One item of a source. `key` is stable across runs (a relative path, a URL): the document's source_id
    is the source's name and this key. `problem` is set when the item was found but could not be read (too
    large, a fetch that failed): its document, if any, is kept as it is."""

    key: str
    sha256: str
    read: Callable[[], bytes]
    filename: str
    media_type: str | None = None
    title: str | None = None
    url: str | None = None
    modified_at: datetime | None = None
    # The source's own version tag (an S3 ETag), kept in the document's metadata for the next run.
    etag: str | None = None
    problem: str | None = None


class Connector(Protocol):
    # Whether the KB's eligible extensions apply to the keys (a web page's URL often has none: the web
    # connector filters by content type instead).
    checks_extensions: bool

    def listing(self, keep_alive: KeepAlive) -> AbstractContextManager[list[SourceItem]]: ...


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def authorization_header(credentials: Mapping[str, str]) -> str | None:
    """The Authorization header a web site or a Git server over HTTP is sent: a bearer `token`, or a
    `username` and `password` (basic); None without credentials."""
    if credentials.get("token"):
        return f"Bearer {credentials['token']}"
    if credentials.get("username") is not None and credentials.get("password") is not None:
        pair = f"{credentials['username']}:{credentials['password']}".encode()
        return f"Basic {base64.b64encode(pair).decode()}"
    return None


def check_alive(keep_alive: KeepAlive) -> None:
    if not keep_alive():
        raise RunStopped("the run no longer holds its source")


def bounded(items: Iterator[SourceItem], max_items: int) -> list[SourceItem]:
    """Every item, or SourceUnreadable past `max_items`: a source read in part would make the rest look
    deleted, so a run never plans with a partial listing."""
    listed: list[SourceItem] = []
    for item in items:
        if len(listed) >= max_items:
            raise SourceUnreadable(
                f"the source has more than {max_items} items (RAGKB_SOURCES__MAX_ITEMS); narrow it or raise the limit"
            )
        listed.append(item)
    return listed
