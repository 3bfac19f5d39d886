"""Real files of every format the tests need, made here by real writers: Pillow and reportlab for scans and
images (Japanese text rendered with a Japanese font from Debian's packages), LibreOffice for the legacy binary
Office formats, odfpy for OpenDocument, the standard library for mail and EPUB, tests.support.compound_file
for Outlook .msg."""

from __future__ import annotations

import io
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Sequence
from email.message import EmailMessage
from pathlib import Path

import docx
import openpyxl
import pptx
from odf.opendocument import OpenDocumentPresentation, OpenDocumentSpreadsheet, OpenDocumentText
from odf.style import GraphicProperties, PageLayout, PageLayoutProperties, Style, TextProperties
from odf.table import Table, TableCell, TableColumn, TableRow
from odf.text import H, P
from PIL import Image, ImageDraw, ImageFont
from reportlab.lib.pagesizes import A4
from reportlab.lib.utils import ImageReader
from reportlab.pdfgen import canvas

# Debian's Japanese fonts (fonts-ipafont-gothic is what `make test` installs; Noto CJK is a common other).
JAPANESE_FONTS = (
    Path("/usr/share/fonts/opentype/ipafont-gothic/ipag.ttf"),
    Path("/usr/share/fonts/truetype/fonts-japanese-gothic.ttf"),
    Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"),
)
# A page scanned at 200 dpi: A4 is 1654 × 2339 pixels.
SCAN_DPI = 200


def japanese_font() -> Path:
    for path in JAPANESE_FONTS:
        if path.is_file():
            return path
    raise RuntimeError("no Japanese font installed: `make test` installs fonts-ipafont-gothic")


def text_image(lines: Sequence[str], width: int = 1654, height: int = 2339, size: int = 40) -> Image.Image:
    """Black text on white, one line per entry, as a scanner (or a screenshot) would give it."""
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(str(japanese_font()), size)
    y = size * 2
    for line in lines:
        draw.text((size * 2, y), line, font=font, fill=0)
        y += int(size * 1.8)
    return image


def vertical_text_image(columns: Sequence[str], size: int = 48) -> Image.Image:
    """Japanese written top to bottom, columns from right to left (縦書き), as in many contracts and notices."""
    image = Image.new("L", (1654, 2339), 255)
    draw = ImageDraw.Draw(image)
    font = ImageFont.truetype(str(japanese_font()), size)
    x = image.width - size * 3
    for column in columns:
        for row, char in enumerate(column):
            draw.text((x, size * 3 + row * int(size * 1.15)), char, font=font, fill=0)
        x -= int(size * 2.2)
    return image


def image_bytes(lines: Sequence[str], image_format: str, width: int = 1400, height: int = 500) -> bytes:
    buffer = io.BytesIO()
    text_image(lines, width, height, size=36).convert("RGB" if image_format == "JPEG" else "L").save(
        buffer, format=image_format
    )
    return buffer.getvalue()


def multipage_tiff(pages: Sequence[Sequence[str]]) -> bytes:
    frames = [text_image(lines, 1400, 500, size=36) for lines in pages]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="TIFF", save_all=True, append_images=frames[1:], compression="tiff_deflate")
    return buffer.getvalue()


def scanned_pdf(pages: Sequence[Sequence[str] | str]) -> bytes:
    """A PDF whose pages are images of text (no text layer); a page given as a string is a text-layer page."""
    buffer = io.BytesIO()
    drawing = canvas.Canvas(buffer, pagesize=A4)
    width, height = A4
    for page in pages:
        if isinstance(page, str):
            drawing.setFont("Helvetica", 11)
            for row, line in enumerate(page.split("\n")):
                drawing.drawString(50, 780 - 16 * row, line)
        else:
            drawing.drawImage(ImageReader(text_image(page)), 0, 0, width, height)
        drawing.showPage()
    drawing.save()
    return buffer.getvalue()


def two_column_pdf(left: Sequence[str], right: Sequence[str], title: str) -> bytes:
    """Two columns whose lines are drawn in turns (left line, right line…), as many writers lay them out."""
    buffer = io.BytesIO()
    drawing = canvas.Canvas(buffer, pagesize=A4)
    drawing.setFont("Helvetica-Bold", 14)
    drawing.drawString(50, 790, title)
    drawing.setFont("Helvetica", 10)
    for row, (a, b) in enumerate(zip(left, right, strict=True)):
        drawing.drawString(50, 750 - 14 * row, a)
        drawing.drawString(320, 750 - 14 * row, b)
    drawing.showPage()
    drawing.save()
    return buffer.getvalue()


def ruled_table_pdf(intro: str, rows: Sequence[Sequence[str]]) -> bytes:
    """A page with a paragraph and a table drawn with rules (a grid), as reports and price lists have."""
    buffer = io.BytesIO()
    drawing = canvas.Canvas(buffer, pagesize=A4)
    drawing.setFont("Helvetica", 11)
    drawing.drawString(50, 790, intro)
    widths = [160, 110, 90]
    top, height = 760, 20
    for r, row in enumerate(rows):
        x = 50
        for c, cell in enumerate(row):
            drawing.rect(x, top - height * (r + 1), widths[c], height)
            drawing.drawString(x + 4, top - height * (r + 1) + 6, cell)
            x += widths[c]
    drawing.showPage()
    drawing.save()
    return buffer.getvalue()


# -- Office, legacy Office (LibreOffice), OpenDocument -----------------------------------------------------------


def word_file(heading: str, paragraphs: Sequence[str], table: Sequence[Sequence[str]] = ()) -> bytes:
    document = docx.Document()
    document.add_heading(heading, 1)
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, cell in enumerate(row):
                grid.cell(r, c).text = cell
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def excel_file(sheet: str, rows: Sequence[Sequence[str]]) -> bytes:
    workbook = openpyxl.Workbook()
    worksheet = workbook.active
    assert worksheet is not None
    worksheet.title = sheet
    for row in rows:
        worksheet.append(list(row))
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def powerpoint_file(slides: Sequence[tuple[str, str]]) -> bytes:
    deck = pptx.Presentation()
    for title, body in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        assert slide.shapes.title is not None
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def libreoffice_convert(files: dict[str, bytes], target: str) -> dict[str, bytes]:
    """Convert each file (name → content) with LibreOffice to `target` (doc, xls, ppt, rtf); name → content."""
    soffice = shutil.which("soffice")
    if soffice is None:
        raise RuntimeError("LibreOffice is not installed: `make test` installs libreoffice-*-nogui")
    with tempfile.TemporaryDirectory(prefix="ragkb-test-lo-") as folder:
        work = Path(folder)
        for name, content in files.items():
            (work / name).write_bytes(content)
        command = [soffice, f"-env:UserInstallation={(work / 'profile').as_uri()}", "--headless", "--norestore"]
        command += ["--convert-to", target, "--outdir", str(work / "out"), *(str(work / name) for name in files)]
        subprocess.run(command, check=True, capture_output=True, timeout=300, cwd=work)
        return {name: (work / "out" / f"{Path(name).stem}.{target}").read_bytes() for name in files}


def _odf_bytes(document: OpenDocumentText | OpenDocumentSpreadsheet | OpenDocumentPresentation) -> bytes:
    buffer = io.BytesIO()
    document.write(buffer)
    return buffer.getvalue()


def odt_file(heading: str, paragraphs: Sequence[str], table: Sequence[Sequence[str]] = ()) -> bytes:
    document = OpenDocumentText()
    document.text.addElement(H(outlinelevel=1, text=heading))
    for paragraph in paragraphs:
        document.text.addElement(P(text=paragraph))
    if table:
        grid = Table(name="Table1")
        grid.addElement(TableColumn(numbercolumnsrepeated=len(table[0])))
        for row in table:
            line = TableRow()
            for cell in row:
                element = TableCell()
                element.addElement(P(text=cell))
                line.addElement(element)
            grid.addElement(line)
        document.text.addElement(grid)
    return _odf_bytes(document)


def ods_file(sheets: dict[str, Sequence[Sequence[str]]]) -> bytes:
    document = OpenDocumentSpreadsheet()
    for name, rows in sheets.items():
        sheet = Table(name=name)
        for row in rows:
            line = TableRow()
            for cell in row:
                element = TableCell(valuetype="string")
                element.addElement(P(text=cell))
                line.addElement(element)
            sheet.addElement(line)
        document.spreadsheet.addElement(sheet)
    return _odf_bytes(document)


def odp_file(slides: Sequence[tuple[str, str]]) -> bytes:
    from odf.draw import Frame, Page, TextBox

    document = OpenDocumentPresentation()
    layout = PageLayout(name="Layout")
    layout.addElement(PageLayoutProperties(margin="0cm", pagewidth="28cm", pageheight="21cm"))
    document.automaticstyles.addElement(layout)
    from odf.style import MasterPage

    master = MasterPage(name="Master", pagelayoutname=layout)
    document.masterstyles.addElement(master)
    frame_style = Style(name="Frame", family="graphic")
    frame_style.addElement(GraphicProperties(stroke="none"))
    frame_style.addElement(TextProperties(fontsize="20pt"))
    document.automaticstyles.addElement(frame_style)
    for title, body in slides:
        page = Page(name=title, masterpagename=master)
        for y, text in (("1cm", title), ("5cm", body)):
            frame = Frame(stylename=frame_style, width="24cm", height="3cm", x="2cm", y=y)
            box = TextBox()
            box.addElement(P(text=text))
            frame.addElement(box)
            page.addElement(frame)
        document.presentation.addElement(page)
    return _odf_bytes(document)


def rtf_file(title: str, paragraphs: Sequence[str]) -> bytes:
    """RTF as Word writes its basics: a font table, paragraphs, non-ASCII characters as \\uN escapes."""

    def escape(text: str) -> str:
        return "".join(c if ord(c) < 128 and c not in "\\{}" else f"\\u{_signed16(ord(c))}?" for c in text)

    body = "".join(f"{{\\pard\\sa200 {escape(p)}\\par}}\n" for p in paragraphs)
    return (
        "{\\rtf1\\ansi\\ansicpg932\\deff0{\\fonttbl{\\f0\\fnil MS Gothic;}}\n"
        f"{{\\pard\\b\\fs32 {escape(title)}\\b0\\fs24\\par}}\n{body}}}"
    ).encode("ascii")


def _signed16(code: int) -> int:
    return code - 0x10000 if code > 0x7FFF else code


# -- EPUB and mail ---------------------------------------------------------------------------------------------


def epub_file(title: str, chapters: Sequence[tuple[str, str]], href: str = "text/chapter{n}.xhtml") -> bytes:
    """An EPUB 3: mimetype first and stored, a container, a package file, one XHTML file per chapter (stored as
    OEBPS/text/chapterN.xhtml; `href` is how the package file names them)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
            '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
            "</rootfiles></container>",
            compress_type=zipfile.ZIP_DEFLATED,
        )
        items = "".join(
            f'<item id="c{n}" href="{href.format(n=n)}" media-type="application/xhtml+xml"/>'
            for n in range(len(chapters))
        )
        spine = "".join(f'<itemref idref="c{n}"/>' for n in range(len(chapters)))
        archive.writestr(
            "OEBPS/content.opf",
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
            f'<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title>'
            '<dc:identifier id="id">urn:uuid:12345</dc:identifier></metadata>'
            f"<manifest>{items}</manifest><spine>{spine}</spine></package>",
            compress_type=zipfile.ZIP_DEFLATED,
        )
        for n, (heading, text) in enumerate(chapters):
            archive.writestr(
                f"OEBPS/text/chapter{n}.xhtml",
                '<?xml version="1.0" encoding="utf-8"?><!DOCTYPE html><html xmlns="http://www.w3.org/1999/xhtml">'
                f"<head><title>{heading}</title></head><body><h1>{heading}</h1><p>{text}</p></body></html>",
                compress_type=zipfile.ZIP_DEFLATED,
            )
    return buffer.getvalue()


def mail_file(subject: str, body: str, attachments: dict[str, tuple[bytes, str]] | None = None) -> bytes:
    """An .eml with a plain-text body; attachments: name → (content, MIME type)."""
    message = EmailMessage()
    message["From"] = "Hanako Sato <hanako@example.com>"
    message["To"] = "team@example.com"
    message["Subject"] = subject
    message["Date"] = "Mon, 02 Mar 2026 09:30:00 +0900"
    message.set_content(body)
    for name, (content, mime) in (attachments or {}).items():
        main, sub = mime.split("/")
        message.add_attachment(content, maintype=main, subtype=sub, filename=name)
    return message.as_bytes()
