"""An S3-compatible bucket (AWS S3, MinIO, Ceph, moto's server...) through boto3: the objects under a prefix.
An object's ETag is kept in its document's metadata; an object whose ETag has not changed since the last run
keeps the sha256 its document has and is not downloaded again. Changed objects are downloaded into a temporary
folder for the run (never whole in memory), refused past the upload size limit."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from ragkb_api.sources.base import KeepAlive, SourceItem, SourceUnreadable, check_alive

if TYPE_CHECKING:  # the stubs (boto3-stubs[s3]) are a development tool, not a dependency
    from mypy_boto3_s3.type_defs import ObjectTypeDef


@dataclass(frozen=True)
class KnownObject:
    """What the last run recorded of an object: its ETag, and the sha256 of the content with that ETag."""

    etag: str
    sha256: str


@dataclass(frozen=True)
class Bucket:
    name: str
    prefix: str
    endpoint_url: str | None
    region: str


class S3Connector:
    checks_extensions = True

    def __init__(
        self,
        bucket: Bucket,
        credentials: Mapping[str, str],
        known: Mapping[str, KnownObject],
        limits: tuple[int, int, float],
    ) -> None:
        self._bucket = bucket
        self._known = known
        self._max_items, self._max_bytes, timeout_s = limits
        self._client = boto3.client(
            "s3",
            endpoint_url=bucket.endpoint_url,
            region_name=bucket.region,
            # username/password of the source's credentials: the access key id and the secret access key.
            aws_access_key_id=credentials.get("username"),
            aws_secret_access_key=credentials.get("password"),
            config=Config(connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 3}),
        )

    @contextmanager
    def listing(self, keep_alive: KeepAlive) -> Iterator[list[SourceItem]]:
        with tempfile.TemporaryDirectory(prefix="ragkb-s3-") as folder:
            try:
                objects = self._objects(keep_alive)
                yield [self._item(entry, Path(folder), keep_alive) for entry in objects]
            except (BotoCoreError, ClientError) as exc:
                raise SourceUnreadable(f"bucket {self._bucket.name}: {exc}") from None

    def _objects(self, keep_alive: KeepAlive) -> list[ObjectTypeDef]:
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self._bucket.name, Prefix=self._bucket.prefix
        )
        objects: list[ObjectTypeDef] = []
        for page in pages:
            check_alive(keep_alive)
            objects += [entry for entry in page.get("Contents", []) if not entry["Key"].endswith("/")]
            if len(objects) > self._max_items:
                raise SourceUnreadable(
                    f"the bucket has more than {self._max_items} objects under {self._bucket.prefix!r} "
                    "(RAGKB_SOURCES__MAX_ITEMS); narrow the prefix or raise the limit"
                )
        return objects

    def _item(self, entry: ObjectTypeDef, folder: Path, keep_alive: KeepAlive) -> SourceItem:
        key, etag, size = entry["Key"], str(entry["ETag"]).strip('"'), int(entry["Size"])
        name = PurePosixPath(key).name
        if size > self._max_bytes:
            problem = f"{size} bytes, more than the {self._max_bytes} an upload may have"
            return SourceItem(key, "", bytes, name, etag=etag, problem=problem)
        known = self._known.get(key)
        path = folder / hashlib.sha256(key.encode()).hexdigest()
        if known is not None and known.etag == etag:
            return SourceItem(key, known.sha256, lambda: self._download(key, path), name, etag=etag)
        check_alive(keep_alive)
        self._download(key, path)
        with path.open("rb") as handle:
            sha256 = hashlib.file_digest(handle, "sha256").hexdigest()
        return SourceItem(key, sha256, path.read_bytes, name, etag=etag, modified_at=entry.get("LastModified"))

    def _download(self, key: str, path: Path) -> bytes:
        if not path.exists():
            self._client.download_file(self._bucket.name, key, str(path))
        return path.read_bytes()
