"""The backup archive (ragkb_api.knowledge_bases.archive): what is written reads back member by member, and an
archive that is not one (links, members out of order, bytes that do not match their name, a gzip bomb) is
refused as invalid input before anything of it is used."""

from __future__ import annotations

import io
import tarfile

import pytest

from ragkb_api.knowledge_bases.archive import (
    DOCUMENTS,
    FORMAT,
    MANIFEST,
    ArchiveReader,
    ArchiveWriter,
    BackedUpDocument,
    BackedUpKb,
    BackupManifest,
    BlobMember,
    PointsMember,
)
from ragkb_core.contracts import ChunkPoint, DocumentPoints, SparseTerms
from ragkb_core.errors import InvalidInput
from ragkb_core.kb_settings import KbAnalyzer, KbChunking, KbRetrieval, KbSync
from ragkb_store.blobs import sha256_of

ORIGINAL = b"# Ferry\n\nThe ferry leaves at 07:40.\n"
DOCUMENT_ID = "ab" * 16


def manifest(documents: int = 1) -> BackupManifest:
    kb = BackedUpKb(
        name="ferries",
        embedding_model="multilingual-e5-small",
        chunking=KbChunking(),
        retrieval=KbRetrieval(),
        analyzer=KbAnalyzer(),
        sync=KbSync(),
    )
    return BackupManifest(
        format=FORMAT, format_version=1, created_at=0.0, knowledge_base=kb, documents=documents, points=1
    )


def document() -> BackedUpDocument:
    return BackedUpDocument(
        id=DOCUMENT_ID,
        source_id="ferry.md",
        title="Ferry",
        media_type="text/markdown",
        size_bytes=len(ORIGINAL),
        blob_sha256=sha256_of(ORIGINAL),
        version=1,
        chunk_count=1,
        status="done",
    )


def points() -> DocumentPoints:
    chunk = ChunkPoint(
        ordinal=0, text="The ferry leaves at 07:40.", dense=[0.6, 0.8], sparse=SparseTerms(indices=[3], values=[1.5])
    )
    return DocumentPoints(
        kb_id="cd" * 16, document_id=DOCUMENT_ID, source_id="ferry.md", version=1, title="Ferry",
        analyzer_version="v2", chunks=[chunk],
    )  # fmt: skip


def written() -> bytes:
    target = io.BytesIO()
    writer = ArchiveWriter(target)
    writer.add_json(MANIFEST, manifest())
    writer.add_lines(DOCUMENTS, [document()])
    writer.add_blob(sha256_of(ORIGINAL), ORIGINAL)
    writer.add_points(DOCUMENT_ID, points())
    writer.close()
    return target.getvalue()


def tar_of(*members: tuple[str, bytes]) -> bytes:
    target = io.BytesIO()
    with tarfile.open(fileobj=target, mode="w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return target.getvalue()


def read_all(data: bytes, budget: int = 10**9) -> list[object]:
    reader = ArchiveReader(io.BytesIO(data), budget)
    try:
        head = reader.head()
        return [head, *reader.rest()]
    finally:
        reader.close()


def test_what_is_written_reads_back_in_order() -> None:
    (read_manifest, documents), blob, point_member = read_all(written())
    assert read_manifest == manifest()
    assert documents == [document()]
    assert blob == BlobMember(sha256_of(ORIGINAL), ORIGINAL)
    assert point_member == PointsMember(DOCUMENT_ID, points())


def test_a_link_member_is_refused() -> None:
    target = io.BytesIO()
    with tarfile.open(fileobj=target, mode="w:gz") as tar:
        link = tarfile.TarInfo(MANIFEST)
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    with pytest.raises(InvalidInput, match="not a regular file"):
        read_all(target.getvalue())


def test_members_out_of_order_or_unknown_are_refused() -> None:
    head = [(MANIFEST, manifest().model_dump_json().encode()), (DOCUMENTS, document().model_dump_json().encode())]
    with pytest.raises(InvalidInput, match=r"expected manifest\.json"):
        read_all(tar_of(head[1], head[0]))
    with pytest.raises(InvalidInput, match="unexpected member"):
        read_all(tar_of(*head, ("../escape", b"x")))


def test_a_blob_whose_bytes_do_not_match_its_name_is_refused() -> None:
    head = [(MANIFEST, manifest().model_dump_json().encode()), (DOCUMENTS, document().model_dump_json().encode())]
    with pytest.raises(InvalidInput, match="sha256"):
        read_all(tar_of(*head, (f"blobs/{sha256_of(ORIGINAL)}", b"other bytes")))


def test_a_manifest_that_miscounts_or_a_cut_archive_is_refused() -> None:
    head = [
        (MANIFEST, manifest(documents=2).model_dump_json().encode()),
        (DOCUMENTS, document().model_dump_json().encode()),
    ]
    with pytest.raises(InvalidInput, match="counts 2 documents"):
        read_all(tar_of(*head))
    with pytest.raises(InvalidInput, match="not a ragkb backup"):
        read_all(written()[: len(written()) // 2])
    with pytest.raises(InvalidInput, match="not a ragkb backup"):
        read_all(b"plain bytes, not gzip")


def test_an_archive_that_unpacks_past_the_budget_is_refused() -> None:
    with pytest.raises(InvalidInput, match="unpacks to more"):
        read_all(written(), budget=100)


def test_an_archive_written_before_bm25_was_set_per_kb_restores_with_the_weights_its_points_have() -> None:
    written = manifest().model_dump(mode="json")
    kb = written["knowledge_base"]
    older = {key: value for key, value in kb["analyzer"].items() if not key.startswith("bm25")}
    read = BackupManifest.model_validate({**written, "knowledge_base": {**kb, "analyzer": older}})
    assert (read.knowledge_base.analyzer.bm25_k1, read.knowledge_base.analyzer.bm25_b) == (1.2, 0.75)
    # Written now, an archive carries its KB's own k1 and b, and reads back as written.
    current = BackupManifest.model_validate(written).knowledge_base.analyzer
    assert current == KbAnalyzer() and (current.bm25_k1, current.bm25_b) == (0.9, 0.6)
