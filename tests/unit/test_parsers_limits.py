"""Limits and refusals that are checked before any parsing library touches the content: Office archives
(format, zip bombs, slide count), unknown media types, and the running header/footer rule of PDF pages."""

from __future__ import annotations

import io
import zipfile

import pytest

from ragkb_core import formats
from ragkb_core.errors import ParseFailed, PayloadTooLarge, UnsupportedMediaType
from ragkb_core.settings import LimitSettings
from ragkb_worker.parsers.pdf import drop_running_lines, readable
from ragkb_worker.parsing import parse

MIB = 1024 * 1024


def archive(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as writer:
        for name, content in members.items():
            writer.writestr(name, content)
    return buffer.getvalue()


def test_a_zip_bomb_is_refused_from_its_directory_before_anything_is_unpacked() -> None:
    # 8 MiB of zeros pack into a few KiB; the main part is not even valid XML, so only a check made
    # before unpacking can answer with the size.
    bomb = archive({"[Content_Types].xml": b"<Types/>", "word/document.xml": b"\0" * (8 * MIB)})
    assert len(bomb) < 64 * 1024
    with pytest.raises(PayloadTooLarge, match=r"unpack to \d+ bytes.*MAX_DECOMPRESSED_BYTES"):
        parse(formats.DOCX, bomb, LimitSettings(max_decompressed_bytes=4 * MIB))


@pytest.mark.parametrize(
    ("media_type", "missing"),
    [(formats.DOCX, "word/document.xml"), (formats.XLSX, "xl/workbook.xml"), (formats.PPTX, "ppt/presentation.xml")],
)
def test_an_archive_without_the_formats_main_part_fails_with_the_reason(media_type: str, missing: str) -> None:
    with pytest.raises(ParseFailed, match=f"no {missing}"):
        parse(media_type, archive({"[Content_Types].xml": b"<Types/>", "other.xml": b"<x/>"}))


def test_a_truncated_office_file_fails_as_damaged() -> None:
    data = archive({"[Content_Types].xml": b"<Types/>", "word/document.xml": b"<w/>"})
    with pytest.raises(ParseFailed, match="damaged or truncated"):
        parse(formats.DOCX, data[: len(data) // 2])


def test_too_many_slides_are_refused_before_the_presentation_is_read() -> None:
    slides = {f"ppt/slides/slide{n}.xml": b"not xml" for n in range(1, 4)}
    data = archive({"[Content_Types].xml": b"<Types/>", "ppt/presentation.xml": b"not xml", **slides})
    with pytest.raises(PayloadTooLarge, match="3 slides, more than the limit of 2"):
        parse(formats.PPTX, data, LimitSettings(max_pages=2))


def test_an_unknown_media_type_has_no_parser() -> None:
    with pytest.raises(UnsupportedMediaType) as caught:
        parse("image/gif", b"GIF89a")
    assert formats.PDF in caught.value.extra["supported_media_types"]


def test_running_headers_and_numbered_footers_are_dropped() -> None:
    bodies = [f"Rule {n * 7}: item {n * 3} applies.\nSee table {n * 2}." for n in range(1, 5)]
    pages = [f"ACME Handbook\n{body}\n© 2024 ACME · page {n} of 4" for n, body in enumerate(bodies, start=1)]
    assert drop_running_lines(pages) == bodies


def test_a_line_on_only_some_pages_or_an_article_heading_is_kept() -> None:
    pages = ["Draft\n第1条\ntext a", "第2条\ntext b", "Draft\n第3条\ntext c", "第4条\ntext d", "第5条\ntext e"]
    # "Draft" is on 2 pages of 5 (not most); "第N条" differs only in its number but is never a running line.
    assert drop_running_lines(pages) == pages


def test_a_single_page_keeps_all_its_lines() -> None:
    assert drop_running_lines(["Title\nbody\nfooter"]) == ["Title\nbody\nfooter"]


def test_text_of_unmapped_glyphs_is_not_readable() -> None:
    assert not readable("\ue000\ue001\ue002 \ufffd\ufffd ab")
    assert readable("第1条 従業員は… (see § 3) 100%")
