"""Hostile and damaged files end with a reason a user can act on, and within the limits (issue 28, items 6 and
12): bodies streamed and stopped at the text limit, lying zip sizes, DTD entity declarations, damaged PDFs,
spreadsheets whose declared dimension is the whole grid, mails nested past the stack."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

import pytest

from ragkb_core import formats
from ragkb_core.errors import ParseFailed, PayloadTooLarge
from ragkb_core.settings import LimitSettings
from ragkb_worker.parsers import archive as archive_module
from ragkb_worker.parsing import parse

W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
SPREADSHEET = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
CONTENT_TYPES = (
    '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="xml" ContentType="application/xml"/></Types>'
)
BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;">'
    '<!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">]>'
)


def archive(members: dict[str, bytes | str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as writer:
        for name, content in members.items():
            writer.writestr(name, content)
    return buffer.getvalue()


def docx_with_body(body: str | bytes) -> bytes:
    return archive({"[Content_Types].xml": CONTENT_TYPES, "word/document.xml": body})


def tiny_paragraphs(count: int) -> str:
    return "".join("<w:p><w:r><w:t>a</w:t></w:r></w:p>" for _ in range(count))


# -- issue 28 item 6: a small file must not unpack into gigabytes of objects ------------------------------------


def test_a_docx_body_is_streamed_and_reading_stops_at_the_text_limit() -> None:
    # 200,000 tiny paragraphs (7 MB of XML in a small zip), then XML that is not even well formed: a reader that
    # builds the whole tree fails on the tail (python-docx did); a stream stops at the text limit long before.
    body = f"<w:document {W}><w:body>{tiny_paragraphs(200_000)}<w:p><w:r><broken"
    with pytest.raises(PayloadTooLarge, match="longer than 100000 characters"):
        parse(formats.DOCX, docx_with_body(body), LimitSettings(max_text_chars=100_000))


def test_a_streamed_docx_keeps_headings_tables_and_textbox_text_once() -> None:
    styles = (
        f'<w:styles {W}><w:style w:type="paragraph" w:styleId="H1"><w:name w:val="heading 1"/></w:style>'
        f'<w:style w:type="paragraph" w:styleId="Mine"><w:name w:val="My heading"/><w:basedOn w:val="H1"/></w:style>'
        "</w:styles>"
    )
    alternate = (
        '<mc:AlternateContent xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006">'
        "<mc:Choice><w:r><w:t>boxed</w:t></w:r></mc:Choice><mc:Fallback><w:r><w:t>boxed</w:t></w:r></mc:Fallback>"
        "</mc:AlternateContent>"
    )
    body = (
        f'<w:document {W}><w:body><w:p><w:pPr><w:pStyle w:val="Mine"/></w:pPr><w:r><w:t>Prices</w:t></w:r></w:p>'
        f"<w:p><w:r><w:t>See </w:t></w:r>{alternate}</w:p>"
        "<w:tbl><w:tr><w:tc><w:p><w:r><w:t>Item</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>Price</w:t></w:r>"
        "</w:p></w:tc></w:tr><w:tr><w:tc><w:p><w:r><w:t>Lamp</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r>"
        "<w:t>7 euros</w:t></w:r></w:p></w:tc></w:tr></w:tbl></w:body></w:document>"
    )
    data = archive({"[Content_Types].xml": CONTENT_TYPES, "word/document.xml": body, "word/styles.xml": styles})
    document = parse(formats.DOCX, data)
    assert document.text == "Prices\n\nSee boxed\n\nItem | Price\nLamp | 7 euros"
    table = next(s for s in document.sections if s.kind == "table")
    assert table.heading_path == ("Prices",) and table.header == "Item | Price"


def test_xlsx_shared_strings_over_the_text_limit_are_refused_before_they_are_loaded() -> None:
    strings = "".join("<si><t>ab</t></si>" for _ in range(100_000))
    data = archive(
        {
            "[Content_Types].xml": CONTENT_TYPES,
            "xl/workbook.xml": f'<workbook xmlns="{SPREADSHEET}"><sheets/></workbook>',
            # After the limit, XML that does not parse: only a reader that loads every string gets there.
            "xl/sharedStrings.xml": f'<sst xmlns="{SPREADSHEET}">{strings}<si><t>broken',
        }
    )
    with pytest.raises(PayloadTooLarge, match="shared strings hold more than 50000 characters"):
        parse(formats.XLSX, data, LimitSettings(max_text_chars=50_000))


@pytest.mark.timeout(60)
def test_a_sheet_declaring_the_whole_grid_is_read_by_its_cells_not_its_dimension() -> None:
    # One value at the far corner: padded to its declared dimension the sheet is 17 billion empty cells.
    sheet = (
        f'<worksheet xmlns="{SPREADSHEET}"><dimension ref="A1:XFD1048576"/><sheetData>'
        '<row r="1"><c r="A1" t="inlineStr"><is><t>Header</t></is></c></row>'
        '<row r="1048576"><c r="B1048576" t="inlineStr"><is><t>corner</t></is></c></row></sheetData></worksheet>'
    )
    relationships = (
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        '<Relationship Id="rId1" Target="worksheets/sheet1.xml" '
        'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet"/></Relationships>'
    )
    workbook = (
        f'<workbook xmlns="{SPREADSHEET}" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/'
        'relationships"><sheets><sheet name="Grid" sheetId="1" r:id="rId1"/></sheets></workbook>'
    )
    content_types = CONTENT_TYPES.replace(
        "</Types>",
        '<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.'
        'spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>',
    )
    data = archive(
        {
            "[Content_Types].xml": content_types,
            "_rels/.rels": relationships.replace("worksheets/sheet1.xml", "xl/workbook.xml").replace(
                "relationships/worksheet", "relationships/officeDocument"
            ),
            "xl/workbook.xml": workbook,
            "xl/_rels/workbook.xml.rels": relationships,
            "xl/worksheets/sheet1.xml": sheet,
        }
    )
    document = parse(formats.XLSX, data)
    assert "corner" in document.text


# -- issue 28 item 12: say what is wrong with the file ----------------------------------------------------------


def lying_sizes(data: bytes, member: str) -> bytes:
    """The archive with `member`'s recorded uncompressed size halved, in its local header and the directory."""
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(member)
    patched = bytearray(data)
    smaller = struct.pack("<I", info.file_size // 2)
    patched[info.header_offset + 22 : info.header_offset + 26] = smaller
    position = data.find(b"PK\x01\x02")
    while position != -1:
        name_length = struct.unpack_from("<H", data, position + 28)[0]
        if data[position + 46 : position + 46 + name_length].decode() == member:
            patched[position + 24 : position + 28] = smaller
        position = data.find(b"PK\x01\x02", position + 4)
    return bytes(patched)


def test_a_zip_member_larger_than_its_recorded_size_is_reported_as_damage() -> None:
    data = lying_sizes(
        docx_with_body(f"<w:document {W}><w:body>{tiny_paragraphs(50)}</w:body></w:document>"), "word/document.xml"
    )
    with pytest.raises(ParseFailed, match=r"damaged: its part word/document.xml is truncated, corrupt or larger"):
        parse(formats.DOCX, data)


@pytest.mark.parametrize(
    ("media_type", "members"),
    [
        (
            formats.DOCX,
            {
                "word/document.xml": f"{BILLION_LAUGHS}<w:document {W}><w:body><w:p><w:r><w:t>&lol2;</w:t></w:r>"
                "</w:p></w:body></w:document>"
            },
        ),
        (formats.XLSX, {"xl/workbook.xml": f'{BILLION_LAUGHS}<workbook xmlns="{SPREADSHEET}"><sheets/></workbook>'}),
        (formats.ODT, {"mimetype": formats.ODT, "content.xml": f"{BILLION_LAUGHS}<office:document-content/>"}),
    ],
)
def test_entity_declarations_are_refused_with_the_reason(media_type: str, members: dict[str, str]) -> None:
    data = archive({"[Content_Types].xml": CONTENT_TYPES, **members})
    with pytest.raises(ParseFailed, match=r"declares a DTD .*entity-expansion"):
        parse(media_type, data)


def test_malformed_xml_in_a_workbook_is_reported_as_damage() -> None:
    data = archive({"[Content_Types].xml": CONTENT_TYPES, "xl/workbook.xml": "<workbook><sheets>"})
    with pytest.raises(ParseFailed, match=r"damaged"):
        parse(formats.XLSX, data)


@pytest.mark.parametrize(
    "data",
    [
        b"%PDF-1.7\n" + bytes(range(256)) * 4,
        # A catalog whose page tree is an object that does not exist.
        b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 9 0 R>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF",
    ],
    ids=["garbage", "no-page-tree"],
)
def test_a_damaged_pdf_fails_with_what_is_wrong(data: bytes) -> None:
    with pytest.raises(ParseFailed, match=r"the PDF (cannot be read: it is damaged|contains no text)"):
        parse(formats.PDF, data)


def test_a_mail_nested_past_the_stack_fails_with_the_reason() -> None:
    depth = 3000
    mail = b"From: a@example.com\nSubject: deep\nMIME-Version: 1.0\n"
    for level in range(depth):
        mail += f'Content-Type: multipart/mixed; boundary="b{level}"\n\n--b{level}\n'.encode()
    mail += b"Content-Type: text/plain\n\nhello\n" + b"".join(f"--b{i}--\n".encode() for i in reversed(range(depth)))
    with pytest.raises(ParseFailed, match="nested too deeply"):
        parse(formats.EML, mail)


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def test_an_image_whose_header_claims_billions_of_pixels_is_refused_before_decoding() -> None:
    # A PNG header for 100000 × 100000 pixels, then an empty data chunk and the end.
    header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 0, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", b"") + png_chunk(b"IEND", b"")
    with pytest.raises(PayloadTooLarge, match=r"too large to decode|more than the limit"):
        parse(formats.PNG, png)


def test_an_image_is_refused_when_the_kb_has_ocr_off() -> None:
    with pytest.raises(ParseFailed, match="OCR is off"):
        parse(formats.PNG, b"\x89PNG\r\n\x1a\n", ocr=False)


def test_a_slide_larger_than_a_part_read_whole_is_refused_before_it_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive_module, "MAX_WHOLE_PART_BYTES", 1024)
    data = archive(
        {
            "[Content_Types].xml": CONTENT_TYPES,
            "ppt/presentation.xml": "<p:presentation/>",
            "ppt/slides/slide1.xml": "<p:sld>" + "<a:t>x</a:t>" * 500 + "</p:sld>",
        }
    )
    with pytest.raises(PayloadTooLarge, match=r"part ppt/slides/slide1.xml is \d+ bytes of XML, more than the 1024"):
        parse(formats.PPTX, data)


def test_a_body_of_empty_paragraphs_is_stopped_by_its_element_count() -> None:
    # No text at all, so the text limit never trips: the parse events are bounded by it instead.
    body = f"<w:document {W}><w:body>{'<w:p/>' * 100_000}</w:body></w:document>"
    with pytest.raises(PayloadTooLarge, match=r"more than 8 elements per character of the text limit \(10000"):
        parse(formats.DOCX, docx_with_body(body), LimitSettings(max_text_chars=10_000))
