"""The name a stored original is downloaded under: safe in the header for any file name (RFC 6266/5987)."""

from __future__ import annotations

from urllib.parse import unquote

import pytest

from ragkb_api.documents.sources import content_disposition, download_name

HOSTILE = [
    "就業規則 第3版.pdf",
    'evil".html',
    "a\r\nSet-Cookie: x=1.txt",
    "semi;colon%20and\\back.md",
    "<script>alert(1)</script>.md",
    "😀 emoji.txt",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_any_name_gives_one_header_line_with_an_ascii_fallback_and_the_exact_utf8_name(name: str) -> None:
    header = content_disposition(name)
    assert header.isascii() and "\r" not in header and "\n" not in header
    kind, fallback, encoded = header.split("; ")
    assert kind == "attachment"
    assert fallback.startswith('filename="') and fallback.endswith('"')
    assert '"' not in fallback[len('filename="') : -1] and "\\" not in fallback and ";" not in fallback[9:]
    assert encoded.startswith("filename*=UTF-8''")
    assert unquote(encoded.removeprefix("filename*=UTF-8''"), encoding="utf-8") == name


def test_a_plain_name_is_its_own_fallback() -> None:
    assert content_disposition("report-2024.pdf") == (
        "attachment; filename=\"report-2024.pdf\"; filename*=UTF-8''report-2024.pdf"
    )


def test_the_name_is_the_uploaded_file_else_the_last_part_of_the_source_id() -> None:
    assert download_name("規程.docx", "docs/rules.docx") == "規程.docx"
    assert download_name(None, "docs\\sub/handbook.md") == "handbook.md"
    assert download_name(None, "notes/") == "notes"
    assert download_name(None, "   ") == "document"
