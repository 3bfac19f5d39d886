"""Upload typing for every format: content first (PDF, Office zips, other binaries), then the name, then the
declared type. (tests/unit/test_formats.py keeps the original text-format cases.)"""

from __future__ import annotations

import io
import zipfile

import pytest

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
        (b"\x89PNG\r\n\x1a\n....", "PNG image"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1....", "legacy Office"),
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
