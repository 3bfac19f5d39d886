"""PDF, Word, Excel and PowerPoint files built here with real writers (reportlab, python-docx, openpyxl,
python-pptx) and parsed with the real readers: sections, pages, heading paths, verbatim chunks, limits."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Sequence

import docx
import openpyxl
import pptx
import pypdf
import pytest
from PIL import Image
from pptx.util import Inches
from reportlab.lib.pagesizes import A4
from reportlab.lib.utils import ImageReader
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.cidfonts import UnicodeCIDFont
from reportlab.pdfgen import canvas

from ragkb_core import formats
from ragkb_core.errors import ParseFailed, PayloadTooLarge
from ragkb_core.formats import detect_media_type
from ragkb_core.kb_settings import KbChunking
from ragkb_core.settings import LimitSettings
from ragkb_worker.chunking import Chunk, Chunker
from ragkb_worker.parsers.word import heading_level
from ragkb_worker.parsing import ParsedDocument, parse

pytestmark = pytest.mark.integration
# reportlab's built-in Japanese CID font: no font file needed.
JAPANESE_FONT = "HeiseiMin-W3"
MIB = 1024 * 1024


class CharTokenizer:
    """One token per non-space character: stands in for the model's tokenizer on Japanese text."""

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        return [(m.start(), m.end()) for m in re.finditer(r"\S", text)]


def chunk(document: ParsedDocument, target: int = 200) -> list[Chunk]:
    settings = KbChunking(target_tokens=target, max_tokens=target + 50, overlap_tokens=0)
    chunks, _ = Chunker(CharTokenizer(), settings).chunk(document)
    return chunks


def pdf(pages: Sequence[Sequence[str]], header: str | None = None, footer: str | None = None) -> bytes:
    """A PDF with one page per list of lines; header/footer ({n} = page number) on every page."""
    pdfmetrics.registerFont(UnicodeCIDFont(JAPANESE_FONT))
    buffer = io.BytesIO()
    drawing = canvas.Canvas(buffer, pagesize=A4)
    for number, lines in enumerate(pages, start=1):
        drawing.setFont(JAPANESE_FONT, 10)
        if header:
            drawing.drawString(50, 800, header)
        for row, line in enumerate(lines):
            drawing.drawString(50, 750 - 20 * row, line)
        if footer:
            drawing.drawString(280, 40, footer.format(n=number))
        drawing.showPage()
    drawing.save()
    return buffer.getvalue()


REGULATION_PAGES = [
    [
        "第1章 総則",
        "（目的）",
        "第1条 この規則は、従業員の就業に関する事項を定める。",
        "第2条（適用範囲）全従業員に適用する。",
    ],
    ["第2章 勤務", "第十二条（始業時刻）始業時刻は午前9時とする。", "2 終業時刻は午後6時とする。"],
    ["第十三条（在宅勤務）従業員は週3日まで在宅勤務ができる。", "第3章 休暇", "第20条（年次有給休暇）10日を付与する。"],
]


@pytest.fixture(scope="module")
def regulation_pdf() -> ParsedDocument:
    data = pdf(REGULATION_PAGES, header="株式会社サンプル 就業規則", footer="- {n} -")
    assert detect_media_type("kisoku.pdf", data[:8192]) == formats.PDF
    return parse(formats.PDF, data)


def test_a_regulation_pdf_has_one_section_per_article_with_its_page(regulation_pdf: ParsedDocument) -> None:
    outline = [(s.heading_path[-1], s.page) for s in regulation_pdf.sections]
    assert outline == [
        ("第1章 総則", 1),
        ("第1条（目的）", 1),
        ("第2条（適用範囲）", 1),
        ("第2章 勤務", 2),
        ("第十二条（始業時刻）", 2),
        ("第十三条（在宅勤務）", 3),
        ("第3章 休暇", 3),
        ("第20条（年次有給休暇）", 3),
    ]
    assert regulation_pdf.sections[4].heading_path == ("第2章 勤務", "第十二条（始業時刻）")


def test_running_header_and_page_numbers_are_dropped(regulation_pdf: ParsedDocument) -> None:
    assert "株式会社サンプル" not in regulation_pdf.text
    assert not re.search(r"- \d -", regulation_pdf.text)
    assert "従業員は週3日まで在宅勤務ができる。" in regulation_pdf.text


def test_pdf_chunks_are_verbatim_and_chapter_lines_alone_are_dropped(regulation_pdf: ParsedDocument) -> None:
    settings = KbChunking(target_tokens=200, max_tokens=250, overlap_tokens=0)
    chunks, report = Chunker(CharTokenizer(), settings).chunk(regulation_pdf)
    assert report.dropped["heading_only"] == 3  # 第1章, 第2章, 第3章 alone on their lines
    assert all(c.text == regulation_pdf.text[c.char_start : c.char_end] for c in chunks)
    article = next(c for c in chunks if c.heading_path[-1] == "第十二条（始業時刻）")
    assert article.page == 2
    assert article.text == "第十二条（始業時刻）始業時刻は午前9時とする。\n2 終業時刻は午後6時とする。"


def test_a_scan_without_text_fails_with_a_readable_reason() -> None:
    buffer = io.BytesIO()
    drawing = canvas.Canvas(buffer)
    drawing.drawImage(ImageReader(Image.new("RGB", (120, 80), "white")), 50, 500, 120, 80)
    drawing.showPage()
    drawing.save()
    with pytest.raises(ParseFailed, match=r"no text layer.*OCR is off"):
        parse(formats.PDF, buffer.getvalue(), ocr=False)
    with pytest.raises(ParseFailed, match=r"OCR found no text on the PDF's 1 scanned page"):
        parse(formats.PDF, buffer.getvalue())


def test_a_pdf_over_the_page_limit_is_refused() -> None:
    with pytest.raises(PayloadTooLarge, match="3 pages, more than the limit of 2"):
        parse(formats.PDF, pdf([["a"], ["b"], ["c"]]), LimitSettings(max_pages=2))


def test_a_damaged_pdf_fails_with_a_reason() -> None:
    with pytest.raises(ParseFailed, match="PDF"):
        parse(formats.PDF, b"%PDF-1.7\n" + b"garbage " * 100)


@pytest.mark.parametrize("algorithm", ["RC4-128", "AES-256"])
def test_a_pdf_with_only_an_owner_password_is_read_and_one_with_a_user_password_fails(algorithm: str) -> None:
    def encrypted(user_password: str) -> bytes:
        writer = pypdf.PdfWriter(clone_from=io.BytesIO(pdf([["Restricted but readable."]])))
        writer.encrypt(user_password=user_password, owner_password="owner", algorithm=algorithm)
        buffer = io.BytesIO()
        writer.write(buffer)
        return buffer.getvalue()

    assert parse(formats.PDF, encrypted("")).text == "Restricted but readable."
    with pytest.raises(ParseFailed, match="protected by a password"):
        parse(formats.PDF, encrypted("secret"))


def test_english_pdf_pages_keep_their_numbers() -> None:
    document = parse(formats.PDF, pdf([["Expense claims are due within 30 days."], ["Hotels up to 150 EUR."]]))
    assert [(s.page, document.text[s.start : s.end]) for s in document.sections] == [
        (1, "Expense claims are due within 30 days."),
        (2, "Hotels up to 150 EUR."),
    ]


def word_document() -> bytes:
    document = docx.Document()
    document.add_heading("Employee handbook", 0)
    document.add_heading("Leave", 1)
    document.add_paragraph("Everyone gets 25 days of paid leave a year.")
    document.add_heading("Parental leave", 2)
    document.add_paragraph("Parents may take 16 weeks.")
    document.add_heading("Empty heading", 1)
    document.add_heading("Allowances", 1)
    table = document.add_table(rows=4, cols=2)
    for row, (item, amount) in enumerate(
        [("Item", "Amount"), ("Bicycle", "30 EUR"), ("Phone", "20 EUR"), ("Gym", "40 EUR")]
    ):
        table.cell(row, 0).text, table.cell(row, 1).text = item, amount
    document.add_heading("就業規則", 1)
    for line in [
        "（目的）",
        "第1条 この規則は就業に関する事項を定める。",
        "第2条（休日）休日は土曜日及び日曜日とする。",
    ]:
        document.add_paragraph(line)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def test_docx_headings_tables_and_articles_become_sections() -> None:
    data = word_document()
    assert detect_media_type("handbook.docx", data[:8192]) == formats.DOCX
    document = parse(formats.DOCX, data)
    outline = [(s.heading_path, s.kind, document.text[s.start : s.end]) for s in document.sections]
    assert outline == [
        (("Employee handbook", "Leave"), "prose", "Everyone gets 25 days of paid leave a year."),
        (("Employee handbook", "Leave", "Parental leave"), "prose", "Parents may take 16 weeks."),
        (
            ("Employee handbook", "Allowances"),
            "table",
            "Item | Amount\nBicycle | 30 EUR\nPhone | 20 EUR\nGym | 40 EUR",
        ),
        (
            ("Employee handbook", "就業規則", "第1条（目的）"),
            "prose",
            "（目的）\n\n第1条 この規則は就業に関する事項を定める。\n\n",
        ),
        (("Employee handbook", "就業規則", "第2条（休日）"), "prose", "第2条（休日）休日は土曜日及び日曜日とする。"),
    ]
    assert document.sections[2].header == "Item | Amount"


@pytest.mark.parametrize(
    ("style", "level"), [("Title", 0), ("Heading 1", 1), ("heading 3", 3), ("見出し 2", 2), ("Normal", None)]
)
def test_heading_levels_come_from_style_names(style: str, level: int | None) -> None:
    assert heading_level(style) == level


def test_a_docx_zip_bomb_is_refused_before_it_is_unpacked() -> None:
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bomb,
        zipfile.ZipFile(io.BytesIO(word_document())) as real,
    ):
        for item in real.infolist():
            bomb.writestr(item, real.read(item))
        bomb.writestr("word/media/padding.bin", b"\0" * (12 * MIB))
    data = buffer.getvalue()
    assert len(data) < MIB
    with pytest.raises(PayloadTooLarge, match="MAX_DECOMPRESSED_BYTES"):
        parse(formats.DOCX, data, LimitSettings(max_decompressed_bytes=8 * MIB))
    assert parse(formats.DOCX, data).sections  # within the default limit (200 MB) it parses


def test_xlsx_sheets_are_tables_named_by_sheet_with_the_header_repeated() -> None:
    workbook = openpyxl.Workbook()
    staff = workbook.active
    assert staff is not None
    staff.title = "Staff"
    staff.append(["Name", "Team", "Leave days"])
    for n in range(40):
        staff.append([f"Person {n}", f"Team {n % 4}", 10 + n % 15])
    budget = workbook.create_sheet("Budget")
    budget.append(["Item", "Cost"])
    budget.append(["Laptop", 1200.5])
    buffer = io.BytesIO()
    workbook.save(buffer)
    assert detect_media_type("people.xlsx", buffer.getvalue()[:8192]) == formats.XLSX
    document = parse(formats.XLSX, buffer.getvalue())
    assert [(s.heading_path, s.kind, s.header) for s in document.sections] == [
        (("Staff",), "table", "Name | Team | Leave days"),
        (("Budget",), "table", "Item | Cost"),
    ]
    chunks = chunk(document, target=120)
    staff_chunks = [c for c in chunks if c.heading_path == ("Staff",)]
    assert len(staff_chunks) > 2
    assert all(c.text.startswith("Name | Team | Leave days\n") for c in staff_chunks)
    assert "Laptop | 1200.5" in document.text


def presentation(slides: int = 3) -> bytes:
    deck = pptx.Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[1])
    assert first.shapes.title is not None
    first.shapes.title.text = "Roadmap 2025"
    first.placeholders[1].text = "Q3: launch the search API"
    first.notes_slide.notes_text_frame.text = "Mention the beta customers."
    second = deck.slides.add_slide(deck.slide_layouts[6])
    second.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1)).text_frame.text = "Budget is 2 million yen."
    table = second.shapes.add_table(3, 2, Inches(1), Inches(3), Inches(4), Inches(1)).table
    for row, (a, b) in enumerate([("Region", "Owner"), ("EMEA", "Ana"), ("APAC", "Ken")]):
        table.cell(row, 0).text, table.cell(row, 1).text = a, b
    for number in range(3, slides + 1):
        extra = deck.slides.add_slide(deck.slide_layouts[5])
        assert extra.shapes.title is not None
        extra.shapes.title.text = f"Topic {number}"
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def test_pptx_has_a_section_per_slide_with_its_number() -> None:
    data = presentation()
    assert detect_media_type("deck.pptx", data[:8192]) == formats.PPTX
    document = parse(formats.PPTX, data)
    outline = [(s.heading_path, s.page, s.kind, document.text[s.start : s.end]) for s in document.sections]
    assert outline == [
        (("Roadmap 2025",), 1, "prose", "Roadmap 2025\n\nQ3: launch the search API\n\nMention the beta customers."),
        (("Slide 2",), 2, "prose", "Budget is 2 million yen."),
        (("Slide 2",), 2, "table", "Region | Owner\nEMEA | Ana\nAPAC | Ken"),
        (("Topic 3",), 3, "prose", "Topic 3"),
    ]
    # A slide holding only its title gives no chunk.
    assert [c.page for c in chunk(document)] == [1, 2, 2]


def test_pptx_over_the_page_limit_is_refused() -> None:
    with pytest.raises(PayloadTooLarge, match="4 slides"):
        parse(formats.PPTX, presentation(slides=4), LimitSettings(max_pages=3))
