"""OCR, tables, columns and the formats added with them, parsed from real files (tests/support/documents.py)
by the real engines: Tesseract and LibreOffice from Debian's packages, PDFium, pdfplumber, xlrd, olefile."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import docx
import pytest

from ragkb_core import formats
from ragkb_core.errors import ParseFailed, PayloadTooLarge
from ragkb_core.formats import detect_media_type
from ragkb_core.settings import LimitSettings
from ragkb_worker.parsers.model import ParseOptions
from ragkb_worker.parsers.pdf import assemble, read_page_range
from ragkb_worker.parsing import ParsedDocument, parse
from tests.support import documents
from tests.support.compound_file import outlook_message

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def parsed(filename: str, data: bytes, **options: bool) -> ParsedDocument:
    return parse(detect_media_type(filename, data[:8192]), data, **options)


def section_of(document: ParsedDocument, phrase: str) -> tuple[tuple[str, ...], int | None, str]:
    section = next(s for s in document.sections if phrase in document.text[s.start : s.end])
    return section.heading_path, section.page, section.kind


# -- OCR ------------------------------------------------------------------------------------------------------

JAPANESE_FORM = ["経費精算申請書", "申請者：山田太郎　所属：営業部", "宿泊費の上限は一泊一万二千円とする。"]
ENGLISH_FORM = ["Expense claim form", "Applicant: John Smith, Sales", "The hotel allowance is 180 dollars per night."]


def test_only_the_scanned_page_of_a_pdf_is_ocred_and_keeps_its_page_number() -> None:
    data = documents.scanned_pdf(["Cafeteria notes\nLunch is served from noon.", JAPANESE_FORM, ENGLISH_FORM])
    beats: list[int] = []  # the worker renews its claim on the document at each beat
    document = parse(formats.PDF, data, heartbeat=lambda: beats.append(1))
    assert len(beats) == 2  # one per OCRed page
    assert "宿泊費の上限は一泊一万二千円とする。" in document.text
    assert "180 dollars per night" in document.text
    assert section_of(document, "一万二千円")[1] == 2
    assert section_of(document, "180 dollars")[1] == 3
    ocr = document.report["ocr"]
    assert isinstance(ocr, dict)
    assert ocr["pages"] == [2, 3]
    assert ocr["mean_confidence"] is not None and ocr["mean_confidence"] > 70
    assert set(ocr["page_confidence"]) == {"2", "3"}
    assert ocr["vertical_pages"] == []


def test_a_page_range_is_read_on_its_own_and_ranges_assemble_into_the_document() -> None:
    data = documents.scanned_pdf(["Page one about lunch.", ENGLISH_FORM, "Page three about parking."])
    options = ParseOptions()
    first, second = read_page_range(data, 0, 2, options), read_page_range(data, 2, 3, options)
    assert [page.number for page in first + second] == [1, 2, 3]
    assert first[1].ocr is not None and second[0].ocr is None
    assert assemble(first + second, options).text == parse(formats.PDF, data).text


def test_a_scan_over_the_ocr_page_limit_is_refused_before_any_page_is_read() -> None:
    data = documents.scanned_pdf([ENGLISH_FORM, ENGLISH_FORM, ENGLISH_FORM])
    with pytest.raises(PayloadTooLarge, match=r"3 scanned pages .* more than the 2 .*MAX_OCR_PAGES"):
        parse(formats.PDF, data, LimitSettings(max_ocr_pages=2))


def test_ocr_stops_at_its_time_budget_with_the_reason() -> None:
    data = documents.scanned_pdf([ENGLISH_FORM, ENGLISH_FORM])
    with pytest.raises(ParseFailed, match=r"did not finish within its time budget of 0.2 s .*OCR_TIME_BUDGET_S"):
        parse(formats.PDF, data, LimitSettings(ocr_time_budget_s=0.2))


def test_with_ocr_off_text_pages_are_kept_and_the_scanned_ones_listed() -> None:
    data = documents.scanned_pdf(["Cafeteria notes\nLunch is served from noon.", ENGLISH_FORM])
    document = parsed("mixed.pdf", data, ocr=False)
    assert "180 dollars" not in document.text
    assert document.report["scanned_pages_not_ocred"] == [2]


@pytest.mark.parametrize(
    ("filename", "image_format", "lines", "phrase"),
    [
        ("form.png", "PNG", ENGLISH_FORM[2:], "180 dollars per night"),
        ("form.jpg", "JPEG", JAPANESE_FORM[2:], "一万二千円"),
        ("form.webp", "WEBP", ["The Quillon vault opens at 7 am."], "Quillon vault"),
    ],
)
def test_images_are_read_by_ocr(filename: str, image_format: str, lines: list[str], phrase: str) -> None:
    document = parsed(filename, documents.image_bytes(lines, image_format))
    assert phrase in document.text
    assert document.sections[0].page == 1


def test_vertical_japanese_is_read_with_the_vertical_model() -> None:
    columns = ["就業規則第十二条", "従業員は所属長の承認を得て", "週二日を上限として在宅勤務を", "行うことができる。"]
    buffer = io.BytesIO()
    documents.vertical_text_image(columns).save(buffer, format="PNG")
    document = parsed("notice.png", buffer.getvalue())
    assert "在宅勤務" in document.text and "所属長の承認" in document.text
    ocr = document.report["ocr"]
    assert isinstance(ocr, dict) and ocr["mean_confidence"] > 70
    assert ocr["vertical_pages"] == [1]


def test_an_image_without_text_fails_with_that_reason() -> None:
    blank = io.BytesIO()
    documents.text_image([], 800, 600).save(blank, format="PNG")
    with pytest.raises(ParseFailed, match=r"OCR found no text in the image"):
        parse(formats.PNG, blank.getvalue())


def test_each_frame_of_a_tiff_is_a_page() -> None:
    data = documents.multipage_tiff([["First page about lunch."], ["The Orbis badge costs 12 euros."]])
    document = parsed("fax.tiff", data)
    assert section_of(document, "Orbis badge")[1] == 2


# -- layout and tables ----------------------------------------------------------------------------------------

LEFT = [
    "The left column starts here and talks",
    "about the Orion project budget which",
    "is reviewed by the finance committee",
    "every quarter in March June September.",
]
RIGHT = [
    "The right column is about parking.",
    "Parking permits cost 35 euros a month",
    "and are sold by the facilities desk",
    "on the ground floor of building B.",
]


def test_two_columns_are_read_one_after_the_other() -> None:
    document = parsed("newsletter.pdf", documents.two_column_pdf(LEFT, RIGHT, "Facilities newsletter"))
    assert "\n".join(LEFT) in document.text
    assert "\n".join(RIGHT) in document.text
    assert document.text.index(LEFT[-1]) < document.text.index(RIGHT[0])


def test_a_ruled_pdf_table_keeps_its_header_for_every_row() -> None:
    rows = [["Item", "Price", "Stock"], *([f"Widget {n}", f"{n * 100} yen", str(n)] for n in range(1, 40))]
    document = parsed("prices.pdf", documents.ruled_table_pdf("Price list of the Kestrel shop", rows))
    table = next(s for s in document.sections if s.kind == "table")
    assert table.header == "Item | Price | Stock"
    assert "Widget 7 | 700 yen | 7" in document.text[table.start : table.end]
    assert document.report["tables"] == 1


# -- more formats ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def legacy_office() -> dict[str, bytes]:
    """.doc, .xls and .ppt written by LibreOffice from files made with odfpy, openpyxl and python-pptx."""
    word = documents.odt_file(
        "Travel",
        ["Train tickets for the Solvay line are booked by the travel desk."],
        [["Item", "Price"], ["Lamp", "7 euros"]],
    )
    excel = documents.excel_file("Equipment", [["Item", "Model"], ["Monitor", "Ridgeback 27"]])
    deck = documents.powerpoint_file(
        [("Welcome", "Lunch at noon"), ("Launch plan", "The Meridian app launches in the Nordic markets first.")]
    )
    converted = {
        **documents.libreoffice_convert({"handbook.odt": word}, "doc"),
        **documents.libreoffice_convert({"equipment.xlsx": excel}, "xls"),
        **documents.libreoffice_convert({"launch.pptx": deck}, "ppt"),
    }
    return {
        "handbook.doc": converted["handbook.odt"],
        "equipment.xls": converted["equipment.xlsx"],
        "launch.ppt": converted["launch.pptx"],
    }


def test_legacy_word_is_converted_with_its_headings_and_tables(legacy_office: dict[str, bytes]) -> None:
    data = legacy_office["handbook.doc"]
    # LibreOffice writes the directory and the Word header past the first 8 KiB: the name tells.
    assert detect_media_type("handbook.doc", data[:8192]) == formats.DOC
    document = parsed("handbook.doc", data)
    assert section_of(document, "Solvay line")[0] == ("Travel",)
    assert section_of(document, "Lamp | 7 euros")[2] == "table"
    assert document.report["converted"] == {"from": "doc", "by": "libreoffice"}


def test_legacy_excel_is_read_as_tables(legacy_office: dict[str, bytes]) -> None:
    document = parsed("equipment.xls", legacy_office["equipment.xls"])
    assert section_of(document, "Monitor | Ridgeback 27") == (("Equipment",), None, "table")


def test_legacy_powerpoint_keeps_slide_numbers(legacy_office: dict[str, bytes]) -> None:
    assert detect_media_type(None, legacy_office["launch.ppt"][:8192]) == formats.PPT
    document = parsed("launch.ppt", legacy_office["launch.ppt"])
    assert section_of(document, "Nordic markets")[:2] == (("Launch plan",), 2)


def test_rtf_is_converted_with_its_japanese_text() -> None:
    document = parsed(
        "note.rtf", documents.rtf_file("在宅勤務", ["在宅勤務は週2日までとする。", "Remote work needs approval."])
    )
    assert "在宅勤務は週2日までとする。" in document.text


def test_opendocument_text_spreadsheet_and_presentation() -> None:
    text = parsed(
        "guide.odt",
        documents.odt_file("Travel", ["The travel desk books tickets."], [["Item", "Price"], ["Lamp", "7 euros"]]),
    )
    assert section_of(text, "travel desk")[0] == ("Travel",)
    table = next(s for s in text.sections if s.kind == "table")
    assert table.header == "Item | Price"
    sheet = parsed("equipment.ods", documents.ods_file({"Equipment": [["Item", "Model"], ["Monitor", "Ridgeback 27"]]}))
    assert section_of(sheet, "Ridgeback 27") == (("Equipment",), None, "table")
    slides = parsed(
        "launch.odp", documents.odp_file([("Welcome", "Lunch at noon"), ("Launch plan", "Nordic markets first")])
    )
    assert section_of(slides, "Nordic markets")[:2] == (("Launch plan",), 2)


def test_epub_chapters_are_read_in_spine_order() -> None:
    book = documents.epub_file(
        "Guide", [("Meals", "Lunch at noon."), ("Travel", "The Solvay line is booked by the desk.")]
    )
    document = parsed("guide.epub", book)
    assert document.text.index("Lunch at noon") < document.text.index("Solvay line")
    assert section_of(document, "Solvay line")[0] == ("Travel",)


def test_a_mail_has_its_headers_body_and_attachments_as_sections() -> None:
    attachment = documents.ruled_table_pdf("Kestrel price list", [["Item", "Price"], ["Lamp", "7 euros"]])
    mail = documents.mail_file(
        "Parking permits",
        "Parking permits for the Quellin garage cost 35 euros per month.",
        {"prices.pdf": (attachment, "application/pdf"), "tool.exe": (b"MZ\x90\x00binary", "application/octet-stream")},
    )
    document = parsed("permits.eml", mail)
    assert section_of(document, "Quellin garage")[0] == ("Parking permits",)
    assert section_of(document, "Lamp | 7 euros") == (("Parking permits", "Attachment: prices.pdf"), 1, "table")
    attachments = document.report["attachments"]
    assert isinstance(attachments, list)
    assert [(a["name"], a["indexed"]) for a in attachments] == [("prices.pdf", True), ("tool.exe", False)]
    assert "executable" in attachments[1]["reason"]


def test_an_outlook_message_has_its_body_and_attachments() -> None:
    message = outlook_message(
        "Visitor badges",
        "Hanako Sato",
        "team@example.com",
        "Visitor badges from the Kestrel front desk are valid for 9 hours.",
        {"rules.txt": "第1条 来訪者は受付で記帳する。".encode()},
    )
    assert detect_media_type(None, message[:8192]) == formats.MSG
    document = parsed("badges.msg", message)
    assert section_of(document, "9 hours")[0] == ("Visitor badges",)
    assert section_of(document, "受付で記帳")[0] == ("Visitor badges", "Attachment: rules.txt")


def test_html_boilerplate_is_removed_but_a_plain_page_is_kept_whole() -> None:
    nav = "".join(f'<li><a href="/p{i}">Menu item {i}</a></li>' for i in range(40))
    page = (
        f"<html><body><header><nav><ul>{nav}</ul></nav></header><main><h1>Badge policy</h1>"
        "<p>Visitors sign in at the east lobby of the Harbor office and wear the badge at all times.</p>"
        "<h2>Prices</h2><table><tr><th>Item</th><th>Price</th></tr><tr><td>Replacement badge</td><td>12 euros</td>"
        "</tr></table></main><aside><h3>Related</h3><a href='/x'>Other news</a></aside>"
        "<footer>© 2026 ACME. All rights reserved.</footer></body></html>"
    )
    document = parsed("policy.html", page.encode())
    assert "Menu item" not in document.text and "rights reserved" not in document.text
    assert section_of(document, "Replacement badge") == (("Badge policy", "Prices"), None, "table")
    assert document.report["boilerplate_removed_chars"] > 0
    plain = "<html><body><h1>Guide</h1><p>The Vantor printers need a PIN.</p></body></html>"
    assert parsed("guide.html", plain.encode()).text == "Guide\n\nThe Vantor printers need a PIN."


# -- hostile files of the new formats -------------------------------------------------------------------------


def test_a_truncated_compound_file_fails_as_damaged() -> None:
    message = outlook_message("Subject", "A", "B", "Body text " * 1000)
    with pytest.raises(ParseFailed, match=r"damaged|not an Outlook message"):
        parse(formats.MSG, message[: len(message) // 3])
    with pytest.raises(ParseFailed, match=r"damaged|not a Word 97"):
        parse(formats.DOC, message)


def test_a_conversion_past_its_time_limit_is_killed_with_the_reason() -> None:
    rtf = documents.rtf_file("Title", ["Some text. " * 2000] * 50)
    with pytest.raises(ParseFailed, match=r"could not be converted within 0.5 s .*CONVERT_TIMEOUT_S"):
        parse(formats.RTF, rtf, LimitSettings(convert_timeout_s=0.5))


def test_an_epub_chapter_outside_the_archive_is_never_read() -> None:
    hostile = documents.epub_file("Guide", [("Meals", "Lunch at noon.")], href="../../../etc/hostname")
    with pytest.raises(ParseFailed, match="no readable chapter"):
        parse(formats.EPUB, hostile)


# -- issue 28 item 6: memory ----------------------------------------------------------------------------------


def tiny_paragraphs_docx(paragraphs: int) -> bytes:
    """A valid Word package (python-docx's template) whose body is `paragraphs` one-letter paragraphs."""
    template = io.BytesIO()
    docx.Document().save(template)
    buffer = io.BytesIO()
    with zipfile.ZipFile(template) as source, zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            if item.filename != "word/document.xml":
                target.writestr(item, source.read(item))
        body = "<w:p><w:r><w:t>a</w:t></w:r></w:p>" * paragraphs
        target.writestr("word/document.xml", f"<w:document {W}><w:body>{body}</w:body></w:document>")
    return buffer.getvalue()


def test_a_docx_of_millions_of_tiny_paragraphs_is_parsed_in_little_memory(tmp_path: Path) -> None:
    """The finding: a 0.5 MB .docx whose body is 190 MB of tiny paragraphs cost a worker 3 GB. Here 2 million
    paragraphs (70 MB of XML in 0.2 MB): reading stops at the default text limit, and the parsing process's
    peak memory grows by far less than a tree of that body takes (python-docx's grew by gigabytes)."""
    path = tmp_path / "tiny.docx"
    path.write_bytes(tiny_paragraphs_docx(2_000_000))
    assert path.stat().st_size < 1_000_000
    script = textwrap.dedent(
        """
        import resource, sys
        from pathlib import Path
        from ragkb_core.errors import PayloadTooLarge
        from ragkb_worker.parsing import parse
        data = Path(sys.argv[1]).read_bytes()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            parse("application/vnd.openxmlformats-officedocument.wordprocessingml.document", data)
        except PayloadTooLarge:
            print("stopped at the text limit")
        print(round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    outcome, grown_mb = done.stdout.splitlines()
    assert outcome == "stopped at the text limit"
    assert int(grown_mb) < 300, f"parsing grew the process by {grown_mb} MB"
