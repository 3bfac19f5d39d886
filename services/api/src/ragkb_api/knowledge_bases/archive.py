"""The backup archive of a KB: a .tar.gz written and read in one pass, in this order:

    manifest.json            format, version, the KB's settings and embedding model, counts
    documents.jsonl          one BackedUpDocument a line
    blobs/<sha256>           each stored original and extracted text the documents use, once
    points/<document id>.json  the indexed version's points, vectors included (ragkb_core DocumentPoints)

Read as a stream (`r|gz`): the order lets a restore create the KB from the manifest, store the blobs and write
the points as they come, holding one document's points in memory at a time. Every member is checked before it
is used: its name against the layout above, its type (regular files only: no links, no devices, no paths out
of the archive), the unpacked total against a bound (a gzip bomb), a blob against its sha256.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from ragkb_core.contracts import DocumentPoints
from ragkb_core.errors import InvalidInput
from ragkb_core.kb_settings import KbAnalyzer, KbChunking, KbRetrieval, KbSync, with_legacy_bm25
from ragkb_store.blobs import sha256_of

FORMAT = "ragkb-kb-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DOCUMENTS = "documents.jsonl"
_BLOB = re.compile(r"blobs/([0-9a-f]{64})")
_POINTS = re.compile(r"points/([0-9a-f]{32})\.json")
# The most the points of one document may unpack to (a document of 20,000 chunks is about 300 MB of JSON).
MAX_POINTS_MEMBER_BYTES = 512 * 1024 * 1024


class BackedUpKb(BaseModel):
    name: str
    description: str = ""
    embedding_model: str
    chunking: KbChunking
    retrieval: KbRetrieval
    analyzer: KbAnalyzer
    sync: KbSync

    @field_validator("analyzer", mode="before")
    @classmethod
    def _archived_before_bm25_was_per_kb(cls, analyzer: Any) -> Any:
        # The archive's points carry the weights they were indexed with: an analyzer without k1 and b had Lucene's.
        return with_legacy_bm25(analyzer)


class BackupManifest(BaseModel):
    format: Literal["ragkb-kb-backup"]
    format_version: int = Field(ge=1, le=FORMAT_VERSION)
    created_at: float
    knowledge_base: BackedUpKb
    documents: int = Field(ge=0)
    points: int = Field(ge=0)


class BackedUpDocument(BaseModel):
    """A document as the backup keeps it: `status` done (its points are in the archive), pending (built again
    from its original after a restore) or failed (with its `error`)."""

    id: str = Field(pattern=r"^[0-9a-f]{32}$")
    source_id: str = Field(min_length=1, max_length=1024)
    title: str = Field(max_length=1024)
    filename: str | None = Field(default=None, max_length=1024)
    media_type: str = Field(max_length=200)
    size_bytes: int = Field(ge=0)
    blob_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    text_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    labels: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    doc_type: Literal["knowledge", "reference"] = "knowledge"
    version: int = Field(ge=1)
    chunk_count: int = Field(ge=0)
    status: Literal["done", "pending", "failed"]
    error: str | None = None


# -- writing --------------------------------------------------------------------------------------------


class ArchiveWriter:
    """Members in the order the reader expects them; `close` finishes the gzip stream."""

    def __init__(self, target: IO[bytes]) -> None:
        self._tar = tarfile.open(fileobj=target, mode="w|gz")  # noqa: SIM115 -- closed by close()

    def add_json(self, name: str, value: BaseModel) -> None:
        self._add(name, value.model_dump_json().encode())

    def add_lines(self, name: str, values: list[BackedUpDocument]) -> None:
        self._add(name, b"".join(value.model_dump_json().encode() + b"\n" for value in values))

    def add_blob(self, sha: str, data: bytes) -> None:
        self._add(f"blobs/{sha}", data)

    def add_points(self, document_id: str, points: DocumentPoints) -> None:
        self._add(f"points/{document_id}.json", points.model_dump_json().encode())

    def close(self) -> None:
        self._tar.close()

    def _add(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mtime = int(time.time())
        info.mode = 0o600
        self._tar.addfile(info, io.BytesIO(data))


# -- reading --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlobMember:
    sha: str
    data: bytes


@dataclass(frozen=True)
class PointsMember:
    document_id: str
    points: DocumentPoints


class ArchiveReader:
    """The archive's manifest and documents first (`head`), then its blobs and points as they come (`rest`)."""

    def __init__(self, source: IO[bytes], max_unpacked_bytes: int) -> None:
        try:
            self._tar = tarfile.open(fileobj=source, mode="r|gz")  # noqa: SIM115 -- closed by close()
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise not_a_backup(f"not a .tar.gz: {exc}") from exc
        self._members = iter(self._tar)
        self._budget = max_unpacked_bytes

    def head(self) -> tuple[BackupManifest, list[BackedUpDocument]]:
        manifest = _parsed(BackupManifest, self._expect(MANIFEST), MANIFEST)
        lines = self._expect(DOCUMENTS).splitlines()
        documents = [_parsed(BackedUpDocument, line, f"{DOCUMENTS} line {n}") for n, line in enumerate(lines, 1)]
        if len(documents) != manifest.documents:
            raise not_a_backup(f"the manifest counts {manifest.documents} documents, {DOCUMENTS} has {len(documents)}")
        return manifest, documents

    def rest(self) -> Iterator[BlobMember | PointsMember]:
        for member in self._next_members():
            if blob := _BLOB.fullmatch(member.name):
                data = self._read(member)
                if sha256_of(data) != blob.group(1):
                    raise not_a_backup(f"{member.name} does not hold the bytes its name says (sha256)")
                yield BlobMember(blob.group(1), data)
            elif points := _POINTS.fullmatch(member.name):
                if member.size > MAX_POINTS_MEMBER_BYTES:
                    raise not_a_backup(f"{member.name} is larger than {MAX_POINTS_MEMBER_BYTES} bytes")
                yield PointsMember(points.group(1), _parsed(DocumentPoints, self._read(member), member.name))
            else:
                raise not_a_backup(f"unexpected member {member.name!r}")

    def close(self) -> None:
        self._tar.close()

    def _expect(self, name: str) -> bytes:
        member = next(self._next_members(), None)
        if member is None or member.name != name:
            raise not_a_backup(f"expected {name} next, found {member.name if member else 'the end'}")
        return self._read(member)

    def _next_members(self) -> Iterator[tarfile.TarInfo]:
        while True:
            try:
                member = next(self._members, None)
            except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
                raise not_a_backup(f"the archive is damaged: {exc}") from exc
            if member is None:
                return
            if not member.isfile():
                raise not_a_backup(f"{member.name!r} is not a regular file")
            yield member

    def _read(self, member: tarfile.TarInfo) -> bytes:
        self._budget -= member.size
        if self._budget < 0:
            raise not_a_backup("the archive unpacks to more than this server restores (a gzip bomb?)")
        handle = self._tar.extractfile(member)
        if handle is None:
            raise not_a_backup(f"{member.name!r} cannot be read")
        try:
            return handle.read()
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise not_a_backup(f"the archive is damaged at {member.name}: {exc}") from exc


def not_a_backup(reason: str) -> InvalidInput:
    return InvalidInput(f"not a ragkb backup: {reason}")


def _parsed(model: Any, data: bytes, where: str) -> Any:
    try:
        return model.model_validate(json.loads(data))
    except (ValueError, ValidationError) as exc:
        raise not_a_backup(f"{where} is not valid: {str(exc)[:300]}") from exc
