"""Upload typing for every format: content first (PDF, Office zips, other binaries), then the name, then the
declared type. (tests/unit/test_formats.py keeps the original text-format cases.)"""

from __future__ import annotations

import io
import zipfile

import pytest

from ragkb_core import formats
from ragkb_core.errors import UnsupportedMediaType
from ragkb_core.formats import (
    CSV,
    DOCX,
    HTML,
    JSON,
    MARKDOWN,
    PDF,
    PLAIN_TEXT,
    PPTX,
    PYTHON,
    SHELL,
    SQL,
    TSX,
    XLSX,
    XML,
    YAML,
    detect_media_type,
    zip_entry_names,
)


def ooxml(*members: str) -> bytes:
    """A small zip holding the named (empty) members, in that order, as Office writers lay them out."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in members:
            archive.writestr(name, "<x/>" * 10)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("filename", "declared", "expected"),
    [
        ("data.csv", None, CSV),
        ("config.yml", None, YAML),
        ("page.html", None, HTML),
        ("feed.xml", None, XML),
        ("x.json", None, JSON),
        ("App.tsx", None, TSX),
        ("tool.py", None, PYTHON),
        ("run.sh", None, SHELL),
        ("schema.sql", None, SQL),
        (None, "application/json", JSON),
        (None, "text/xml", XML),
    ],
)
def test_text_formats_are_recognised(filename: str | None, declared: str | None, expected: str) -> None:
    assert detect_media_type(filename, b"hello", declared) == expected


@pytest.mark.parametrize(("head", "expected"), [(b"<!DOCTYPE html><html>", HTML), (b'<?xml version="1.0"?>', XML)])
def test_a_nameless_upload_is_typed_by_its_first_characters(head: bytes, expected: str) -> None:
    assert detect_media_type(None, head) == expected


def test_a_pdf_is_recognised_by_its_content_whatever_the_name() -> None:
    assert detect_media_type("report.txt", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n") == PDF
    assert detect_media_type(None, b"%PDF-1.4 ...") == PDF


def test_a_text_mentioning_pdf_is_still_text() -> None:
    assert detect_media_type("notes.md", b"# About\nfiles start with %PDF-1.7\n") == MARKDOWN


@pytest.mark.parametrize(
    ("members", "expected"),
    [
        (("[Content_Types].xml", "_rels/.rels", "word/document.xml"), DOCX),
        (("docProps/app.xml", "xl/workbook.xml", "[Content_Types].xml"), XLSX),
        (("[Content_Types].xml", "ppt/presentation.xml"), PPTX),
    ],
)
def test_office_files_are_told_apart_by_their_zip_entries(members: tuple[str, ...], expected: str) -> None:
    assert detect_media_type("misnamed.bin", ooxml(*members)[:8192]) == expected


def test_an_office_zip_whose_parts_lie_beyond_the_head_is_typed_by_its_extension() -> None:
    head = ooxml("[Content_Types].xml")[:8192]
    assert detect_media_type("deck.pptx", head) == PPTX


def test_a_plain_zip_is_refused_even_named_docx() -> None:
    with pytest.raises(UnsupportedMediaType, match="zip archive"):
        detect_media_type("letter.docx", ooxml("a.txt", "b.txt"))


def test_zip_entry_names_are_read_from_local_headers() -> None:
    assert zip_entry_names(ooxml("[Content_Types].xml", "word/document.xml")) == [
        "[Content_Types].xml",
        "word/document.xml",
    ]


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        (b"GIF89a....", "GIF image"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1....", "compound file whose kind cannot be told"),
        (b"\x7fELF\x02\x01", "executable"),
        (b"abc\x00\x01\x02def", "binary"),
    ],
)
def test_binary_content_is_refused_whatever_the_name(head: bytes, reason: str) -> None:
    with pytest.raises(UnsupportedMediaType, match=reason) as caught:
        detect_media_type("report.txt", head)
    assert caught.value.status == 415
    assert ".md" in caught.value.extra["supported_extensions"]
    assert ".pdf" in caught.value.extra["supported_extensions"]


def test_a_document_extension_over_text_content_is_refused() -> None:
    with pytest.raises(UnsupportedMediaType, match="not a PDF"):
        detect_media_type("fake.pdf", b"just some text")


def test_a_document_type_declared_over_text_content_is_refused() -> None:
    with pytest.raises(UnsupportedMediaType, match="declared as application/pdf but its content is text"):
        detect_media_type(None, b"just some text", "application/pdf")


def test_utf16_text_is_not_mistaken_for_binary() -> None:
    assert detect_media_type("notes.txt", "有給休暇".encode("utf-16")) == PLAIN_TEXT


def test_unknown_extension_is_refused_with_the_supported_list() -> None:
    with pytest.raises(UnsupportedMediaType) as caught:
        detect_media_type("photo.heic", b"text-like")
    assert caught.value.status == 415
    supported = caught.value.extra["supported_extensions"]
    for extension in (".pdf", ".docx", ".xlsx", ".pptx", ".csv", ".ts", ".dart", ".sql", ".yaml"):
        assert extension in supported


# -- the formats added with OCR, legacy Office, OpenDocument, EPUB and mail -----------------------------------


def stored_first(mimetype: str, *members: str) -> bytes:
    """A zip whose first entry is `mimetype`, stored, as OpenDocument and EPUB require."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), mimetype, compress_type=zipfile.ZIP_STORED)
        for name in members:
            archive.writestr(name, "<x/>", compress_type=zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", formats.PNG),
        (b"\xff\xd8\xff\xe0\0\x10JFIF", formats.JPEG),
        (b"II*\0\x08\0\0\0", formats.TIFF),
        (b"MM\0*\0\0\0\x08", formats.TIFF),
        (b"RIFF\x24\0\0\0WEBPVP8 ", formats.WEBP),
        (b"{\\rtf1\\ansi\\ansicpg932 hello}", formats.RTF),
        (stored_first(formats.ODT, "content.xml"), formats.ODT),
        (stored_first(formats.ODS, "content.xml"), formats.ODS),
        (stored_first(formats.ODP, "content.xml"), formats.ODP),
        (stored_first(formats.EPUB, "META-INF/container.xml"), formats.EPUB),
    ],
)
def test_new_binary_formats_are_recognised_by_their_content_whatever_the_name(head: bytes, expected: str) -> None:
    assert detect_media_type("upload.bin", head[:8192]) == expected
    assert detect_media_type(None, head[:8192]) == expected


def compound_head(*stream_names: str) -> bytes:
    """The first bytes of a compound file whose directory (right after the header) names these streams."""
    header = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504)
    entries = b"".join((name.encode("utf-16-le") + b"\0\0").ljust(128, b"\0") for name in ("Root Entry", *stream_names))
    return header + entries


@pytest.mark.parametrize(
    ("streams", "expected"),
    [
        (("WordDocument", "1Table"), formats.DOC),
        (("Workbook",), formats.XLS),
        (("PowerPoint Document", "Current User"), formats.PPT),
        (("__substg1.0_0037001F", "__properties_version1.0"), formats.MSG),
    ],
)
def test_compound_files_are_told_apart_by_their_stream_names(streams: tuple[str, ...], expected: str) -> None:
    assert detect_media_type(None, compound_head(*streams)) == expected


def test_a_compound_file_whose_directory_lies_further_in_is_typed_by_its_name_or_refused() -> None:
    head = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(2000)
    assert detect_media_type("minutes.doc", head) == formats.DOC
    with pytest.raises(UnsupportedMediaType, match=r"name it .doc, .xls, .ppt or .msg"):
        detect_media_type(None, head)


def test_a_password_protected_office_file_is_refused_with_the_reason() -> None:
    with pytest.raises(UnsupportedMediaType, match="password-protected"):
        detect_media_type("secret.docx", compound_head("EncryptedPackage", "EncryptionInfo"))


def test_mail_is_recognised_by_its_name_its_declared_type_or_its_headers() -> None:
    mail = b"From: Hanako <hanako@example.com>\nTo: team@example.com\nSubject: Parking\n\nPermits cost 35 euros.\n"
    assert detect_media_type("permits.eml", mail) == formats.EML
    assert detect_media_type(None, mail, "message/rfc822") == formats.EML
    assert detect_media_type(None, mail) == formats.EML
    assert detect_media_type(None, b"From here on, the text is plain.\nNothing else.") == PLAIN_TEXT


def test_an_image_name_over_text_content_is_refused() -> None:
    with pytest.raises(UnsupportedMediaType, match="not a PNG file"):
        detect_media_type("photo.png", b"just some text")
