"""Every supported format, end to end: a small generated file is uploaded through the public API (multipart),
ingested by the real worker, and a question whose answer lies in one part of it finds that part first, with
its page (PDF, PowerPoint) or heading path (Markdown, HTML, Word, Excel, code) in the citation."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docx
import openpyxl
import pptx
import pytest
from PIL import Image
from reportlab.lib.pagesizes import A4
from reportlab.lib.utils import ImageReader
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.cidfonts import UnicodeCIDFont
from reportlab.pdfgen import canvas

from tests.e2e.conftest import RunningRagkb

pytestmark = pytest.mark.e2e
# The same unrelated passage sits beside every answer, so that finding the answer means telling parts apart.
CAFETERIA = "The cafeteria serves lunch from noon until two o'clock."
JAPANESE_FONT = "HeiseiMin-W3"  # reportlab's built-in CID font: no font file needed


@dataclass(frozen=True)
class Sample:
    filename: str
    content: bytes
    question: str
    answer: str  # a phrase of the passage that must be the top result
    heading: str | None = None  # last element of the top result's heading path
    page: int | None = None


def text_sample(filename: str, content: str, question: str, answer: str, heading: str | None = None) -> Sample:
    return Sample(filename, content.encode(), question, answer, heading)


def code_sample(filename: str, template: str, fact: str, qa: tuple[str, str, str]) -> Sample:
    """`template` holds a distractor definition and the answer's definition; {fact} and {cafeteria} fill them.
    `qa`: the question, a phrase of the answer, and the name of the definition that holds it."""
    question, answer, heading = qa
    return text_sample(filename, template.format(fact=fact, cafeteria=CAFETERIA), question, answer, heading)


def pdf_bytes(pages: Sequence[Sequence[str]], header: str, footer: str) -> bytes:
    pdfmetrics.registerFont(UnicodeCIDFont(JAPANESE_FONT))
    buffer = io.BytesIO()
    drawing = canvas.Canvas(buffer, pagesize=A4)
    for number, lines in enumerate(pages, start=1):
        drawing.setFont(JAPANESE_FONT, 11)
        drawing.drawString(50, 800, header)
        for row, line in enumerate(lines):
            drawing.drawString(50, 750 - 22 * row, line)
        drawing.drawString(280, 40, footer.format(n=number))
        drawing.showPage()
    drawing.save()
    return buffer.getvalue()


def regulation_pdf() -> Sample:
    pages = [
        ["第1章 総則", "（目的）", "第1条 この規則は、従業員の就業に関する事項を定める。"],
        ["第2章 勤務", "第12条（始業時刻）始業時刻は午前9時、終業時刻は午後6時とする。"],
        ["第13条（在宅勤務）従業員は、所属長の承認を得て、週2日を上限として在宅勤務を行うことができる。"],
    ]
    content = pdf_bytes(pages, header="株式会社サンプル 就業規則", footer="- {n} -")
    return Sample("kisoku.pdf", content, "在宅勤務は週に何日までできますか", "週2日", "第13条（在宅勤務）", page=3)


def word_sample() -> Sample:
    document = docx.Document()
    document.add_heading("Employee handbook", 0)
    document.add_heading("Meals", 1)
    document.add_paragraph(CAFETERIA)
    document.add_heading("Travel", 1)
    document.add_paragraph("Train tickets for the Solvay line are booked through the travel desk on floor 3.")
    buffer = io.BytesIO()
    document.save(buffer)
    question = "Who books train tickets for the Solvay line?"
    return Sample("handbook.docx", buffer.getvalue(), question, "travel desk", "Travel")


def excel_sample() -> Sample:
    workbook = openpyxl.Workbook()
    meals = workbook.active
    assert meals is not None
    meals.title = "Meals"
    meals.append(["Meal", "Time"])
    meals.append(["Lunch", "12:00-14:00"])
    equipment = workbook.create_sheet("Equipment")
    equipment.append(["Item", "Model", "Loan period"])
    equipment.append(["Monitor", "Ridgeback 27", "3 years"])
    equipment.append(["Headset", "Plover", "1 year"])
    buffer = io.BytesIO()
    workbook.save(buffer)
    question = "How long is the loan period of a Ridgeback monitor?"
    return Sample("equipment.xlsx", buffer.getvalue(), question, "Ridgeback 27", "Equipment")


def powerpoint_sample() -> Sample:
    deck = pptx.Presentation()
    for title, body in [
        ("Welcome", CAFETERIA),
        ("Budget", "The marketing budget is reviewed every quarter."),
        ("Launch plan", "The Meridian app launches in the Nordic markets first, then in Germany."),
    ]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        assert slide.shapes.title is not None
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    buffer = io.BytesIO()
    deck.save(buffer)
    question = "In which markets does the Meridian app launch first?"
    return Sample("launch.pptx", buffer.getvalue(), question, "Nordic markets", "Launch plan", page=3)


C_LIKE = "int cafeteria_hours(void) {{\n    /* {cafeteria} */\n    return 2;\n}}\n\n{answer}"


def samples() -> list[Sample]:
    return [
        text_sample(
            "kitchen.md",
            f"# Handbook\n\n## Meals\n\n{CAFETERIA}\n\n## Kitchen equipment\n\n"
            "The Zorvik espresso machine is descaled every 14 days by the facilities team.\n",
            "How often is the Zorvik espresso machine descaled?",
            "every 14 days",
            "Kitchen equipment",
        ),
        text_sample(
            "parking.txt",
            f"{CAFETERIA}\n\nParking permits for the Quellin garage cost 35 euros per month.\n",
            "What does a parking permit for the Quellin garage cost?",
            "35 euros",
        ),
        text_sample(
            "lamps.csv",
            "item,power,room\nCeiling light,40 watts,hall\nBramble desk lamp,7 watts,office\n",
            "How much power does the Bramble desk lamp use?",
            "Bramble desk lamp",
        ),
        text_sample(
            "rooms.tsv",
            "room\tcapacity\tfloor\nOstrava meeting room\t18 people\t4\nLisbon booth\t2 people\t1\n",
            "How many people fit in the Ostrava meeting room?",
            "Ostrava",
        ),
        text_sample(
            "badges.json",
            json.dumps(
                {
                    "cafeteria": {"note": CAFETERIA},
                    "visitor_badges": {"issued_by": "Kestrel front desk", "valid_for": "9 hours after check-in"},
                },
                indent=2,
            ),
            "How long is a visitor badge from the Kestrel front desk valid?",
            "9 hours",
        ),
        text_sample(
            "storage.xml",
            f'<?xml version="1.0"?>\n<facilities>\n  <note>{CAFETERIA}</note>\n'
            '  <bike-storage location="Larchmont basement">The Larchmont basement has 42 bike storage spaces.'
            "</bike-storage>\n</facilities>\n",
            "How many bike storage spaces are in the Larchmont basement?",
            "42 bike",
        ),
        text_sample(
            "guide.html",
            f"<html><body><h1>Office guide</h1><h2>Meals</h2><p>{CAFETERIA}</p><h2>Printing</h2>"
            "<p>Colour printing on the Vantor printers needs a PIN from the IT service desk.</p></body></html>",
            "What do I need for colour printing on the Vantor printers?",
            "PIN",
            "Printing",
        ),
        text_sample(
            "wifi.yaml",
            f'meals: "{CAFETERIA}"\nguest_wifi:\n  network: Pelican-Guest\n'
            "  password: The Pelican guest wifi password is rotated every Monday morning.\n",
            "When is the Pelican guest wifi password rotated?",
            "every Monday",
        ),
        text_sample(
            "backups.yml",
            f'meals: "{CAFETERIA}"\nbackups:\n  vault: Ferngate\n'
            "  retention: Backups in the Ferngate vault are kept for 90 days.\n",
            "How long are backups kept in the Ferngate vault?",
            "90 days",
        ),
        code_sample(
            "uploads.py",
            'def cafeteria_hours():\n    """{cafeteria}"""\n    return 12, 14\n\n\n'
            'def upload_retry_delay():\n    """{fact}"""\n    return 45\n',
            "Failed Tidewater uploads are retried after 45 seconds.",
            ("After how many seconds are failed Tidewater uploads retried?", "45 seconds", "upload_retry_delay"),
        ),
        code_sample(
            "session.js",
            "function cafeteriaHours() {{\n  // {cafeteria}\n  return [12, 14];\n}}\n\n"
            "function sessionTimeout() {{\n  // {fact}\n  return 20 * 60;\n}}\n",
            "Session cookies for the Marlowe portal expire after 20 minutes.",
            ("When do Marlowe portal session cookies expire?", "20 minutes", "sessionTimeout"),
        ),
        code_sample(
            "limits.ts",
            "export function cafeteriaHours(): number[] {{\n  // {cafeteria}\n  return [12, 14];\n}}\n\n"
            "export function rateLimit(): number {{\n  // {fact}\n  return 500;\n}}\n",
            "The Brisket API accepts at most 500 requests per minute per key.",
            ("How many requests per minute does the Brisket API accept?", "500 requests", "rateLimit"),
        ),
        code_sample(
            "Dashboard.jsx",
            "export function Cafeteria() {{\n  // {cafeteria}\n  return <p>Lunch</p>;\n}}\n\n"
            "export function DashboardRefresh() {{\n  // {fact}\n  return <p>15 s</p>;\n}}\n",
            "The Saffron dashboard refreshes its charts every 15 seconds.",
            ("How often does the Saffron dashboard refresh its charts?", "15 seconds", "DashboardRefresh"),
        ),
        code_sample(
            "Theme.tsx",
            "export const Cafeteria = (): JSX.Element => {{\n  // {cafeteria}\n  return <p>Lunch</p>;\n}};\n\n"
            "export const DarkMode = (): JSX.Element => {{\n  // {fact}\n  return <p>20:00</p>;\n}};\n",
            "Dark mode in the Juniper app turns on automatically after 8 pm.",
            ("When does dark mode turn on in the Juniper app?", "8 pm", "DarkMode"),
        ),
        code_sample(
            "InvoicePolicy.java",
            "public class InvoicePolicy {{\n    public int cafeteriaHours() {{\n        // {cafeteria}\n"
            "        return 2;\n    }}\n\n    public int archiveYears() {{\n        // {fact}\n        return 7;\n"
            "    }}\n}}\n",
            "Invoices from the Halcyon billing system are archived after seven years.",
            ("When are Halcyon invoices archived?", "seven years", "archiveYears"),
        ),
        code_sample(
            "reset.rb",
            "def cafeteria_hours\n  # {cafeteria}\n  2\nend\n\ndef reset_link_ttl\n  # {fact}\n  7200\nend\n",
            "Password reset links from the Ember portal expire after two hours.",
            ("When do Ember password reset links expire?", "two hours", "reset_link_ttl"),
        ),
        code_sample(
            "queue.go",
            "package queue\n\nfunc cafeteriaHours() int {{\n\t// {cafeteria}\n\treturn 2\n}}\n\n"
            "func messageRetention() int {{\n\t// {fact}\n\treturn 3\n}}\n",
            "The Nimbus queue drops messages older than three days.",
            ("How old can messages in the Nimbus queue get?", "three days", "messageRetention"),
        ),
        code_sample(
            "cache.rs",
            "fn cafeteria_hours() -> u32 {{\n    // {cafeteria}\n    2\n}}\n\n"
            "fn cache_ttl() -> u32 {{\n    // {fact}\n    600\n}}\n",
            "The Gravel cache evicts entries after 600 seconds of inactivity.",
            ("When does the Gravel cache evict entries?", "600 seconds", "cache_ttl"),
        ),
        code_sample(
            "sensor.c",
            C_LIKE.replace("{answer}", "int sample_rate(void) {{\n    /* {fact} */\n    return 200;\n}}\n"),
            "The Fathom sensor is sampled 200 times per second.",
            ("How often is the Fathom sensor sampled?", "200 times", "sample_rate"),
        ),
        code_sample(
            "renderer.cpp",
            C_LIKE.replace("{answer}", "int max_frame_rate() {{\n    // {fact}\n    return 144;\n}}\n"),
            "The Orchid renderer draws at most 144 frames per second.",
            ("What is the maximum frame rate of the Orchid renderer?", "144 frames", "max_frame_rate"),
        ),
        code_sample(
            "buffer.h",
            C_LIKE.replace(
                "{answer}", "static inline int buffer_size(void) {{\n    /* {fact} */\n    return 4096;\n}}\n"
            ),
            "The Basalt buffer holds 4096 bytes.",
            ("How many bytes does the Basalt buffer hold?", "4096 bytes", "buffer_size"),
        ),
        code_sample(
            "Refunds.cs",
            "public class Refunds\n{{\n    public int CafeteriaHours()\n    {{\n        // {cafeteria}\n"
            "        return 2;\n    }}\n\n    public int ProcessingDays()\n    {{\n        // {fact}\n"
            "        return 5;\n    }}\n}}\n",
            "Refunds in the Copperleaf shop are processed within five business days.",
            ("How quickly are Copperleaf shop refunds processed?", "five business days", "ProcessingDays"),
        ),
        code_sample(
            "newsletter.php",
            "<?php\n\nfunction cafeteria_hours() {{\n    // {cafeteria}\n    return 2;\n}}\n\n"
            "function confirmation_delay() {{\n    // {fact}\n    return 10;\n}}\n",
            "Newsletter sign-ups on the Willow site are confirmed by email within ten minutes.",
            ("How fast are newsletter sign-ups on the Willow site confirmed?", "ten minutes", "confirmation_delay"),
        ),
        code_sample(
            "sync.dart",
            "int cafeteriaHours() {{\n  // {cafeteria}\n  return 2;\n}}\n\n"
            "int syncInterval() {{\n  // {fact}\n  return 30;\n}}\n",
            "The Puffin mobile app syncs offline notes every 30 minutes.",
            ("How often does the Puffin app sync offline notes?", "30 minutes", "syncInterval"),
        ),
        code_sample(
            "ledger.sql",
            "CREATE TABLE cafeteria_menu (\n  -- {cafeteria}\n  dish text\n);\n\n"
            "CREATE TABLE lantern_audit (\n  -- {fact}\n  id bigint,\n  kept_until date\n);\n",
            "Audit rows in the Lantern ledger are kept for 400 days.",
            ("How long are audit rows kept in the Lantern ledger?", "400 days", "lantern_audit"),
        ),
        code_sample(
            "build.sh",
            "#!/bin/sh\n\ncafeteria_hours() {{\n  # {cafeteria}\n  echo 2\n}}\n\n"
            "nightly_build() {{\n  # {fact}\n  make all\n}}\n",
            "Nightly Granite builds start at 1 am.",
            ("When do the nightly Granite builds start?", "1 am", "nightly_build"),
        ),
        regulation_pdf(),
        word_sample(),
        excel_sample(),
        powerpoint_sample(),
    ]


SAMPLES = samples()


@pytest.fixture(scope="module")
def formats_kb(ragkb: RunningRagkb, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Upload every sample into one KB and wait until each is done; filename → document id (+ kb)."""
    folder = tmp_path_factory.mktemp("formats")
    kb_id = ragkb.create_kb("formats")
    documents = {"kb_id": kb_id}
    for sample in SAMPLES:
        path = folder / sample.filename
        path.write_bytes(sample.content)
        documents[sample.filename] = str(ragkb.upload_file(kb_id, path)["id"])
    for sample in SAMPLES:
        done = ragkb.wait_document(kb_id, documents[sample.filename])
        assert done["status"] == "done", (sample.filename, done)
    return documents


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.filename for s in SAMPLES])
def test_a_question_finds_its_answer_in_each_format(
    ragkb: RunningRagkb, formats_kb: dict[str, str], sample: Sample
) -> None:
    top = ragkb.search(sample.question, [formats_kb["kb_id"]])[0]
    assert top["document_id"] == formats_kb[sample.filename], top
    assert sample.answer in top["text"]
    if sample.heading is not None:
        assert top["heading_path"][-1] == sample.heading, top["heading_path"]
    if sample.page is not None:
        assert top["page"] == sample.page


def test_a_pdf_citation_leaves_out_the_running_header(ragkb: RunningRagkb, formats_kb: dict[str, str]) -> None:
    results = ragkb.search("株式会社サンプル 就業規則", [formats_kb["kb_id"]], top_k=12)
    assert results
    assert all("株式会社サンプル" not in r["text"] for r in results)


def plain_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("notes.txt", "not an office file")
        archive.writestr("more.txt", "still not one")
    return buffer.getvalue()


def upload_raw(ragkb: RunningRagkb, kb_id: str, filename: str, content: bytes) -> Any:
    return ragkb.client.post(f"/v1/knowledge-bases/{kb_id}/documents", files={"file": (filename, content)})


@pytest.mark.parametrize(
    ("filename", "content"),
    [
        ("photo.gif", b"GIF89a" + bytes(64)),
        ("notes.txt", b"\x7fELF\x02\x01\x01" + bytes(64)),
        ("archive.docx", plain_zip()),
        ("drawing.heic", b"plain words"),
    ],
)
def test_unsupported_or_binary_content_is_refused_with_415(
    ragkb: RunningRagkb, formats_kb: dict[str, str], filename: str, content: bytes
) -> None:
    response = upload_raw(ragkb, formats_kb["kb_id"], filename, content)
    assert response.status_code == 415, response.text
    problem = response.json()
    assert ".pdf" in problem["supported_extensions"] and ".docx" in problem["supported_extensions"]


def test_a_scan_without_text_ends_failed_with_the_reason(
    ragkb: RunningRagkb, formats_kb: dict[str, str], tmp_path: Path
) -> None:
    buffer = io.BytesIO()
    drawing = canvas.Canvas(buffer)
    drawing.drawImage(ImageReader(Image.new("RGB", (120, 80), "white")), 50, 500, 120, 80)
    drawing.showPage()
    drawing.save()
    path = tmp_path / "scan.pdf"
    path.write_bytes(buffer.getvalue())
    accepted = ragkb.upload_file(formats_kb["kb_id"], path)
    failed = ragkb.wait_document(formats_kb["kb_id"], str(accepted["id"]))
    assert failed["status"] == "failed"
    # A white image: OCR reads it (OCR is on by default) and finds nothing.
    assert "OCR found no text" in failed["error"]
