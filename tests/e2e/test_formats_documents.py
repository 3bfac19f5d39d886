"""Documents as companies have them, end to end: scans and images read by OCR (Japanese and English), tables,
two-column pages, legacy Office, RTF, OpenDocument, EPUB, mail with attachments and web pages with
boilerplate. Each real file (tests/support/documents.py) is uploaded through the public API, ingested by the
real worker (Tesseract and LibreOffice from Debian's packages), and found by a question about its content with
the right page or heading path; a hostile file of each new type ends `failed` with what is wrong with it."""

from __future__ import annotations

import functools
import io
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import RunningRagkb
from tests.support import documents
from tests.support.compound_file import compound_file, outlook_message

pytestmark = pytest.mark.e2e
CAFETERIA = "The cafeteria serves lunch from noon until two o'clock."


@dataclass(frozen=True)
class Sample:
    filename: str
    build: Callable[[], bytes]  # made when the module's KB is filled, not when the tests are collected
    question: str
    answer: str  # a phrase of the passage that must be the top result
    heading: tuple[str, ...] | None = None  # the top result's heading path
    page: int | None = None


@functools.cache
def legacy_office() -> dict[str, bytes]:
    """.doc, .xls and .ppt written by LibreOffice (no Python writer exists for them)."""
    word = documents.odt_file(
        "Archive rules",
        [CAFETERIA, "Signed contracts are archived by the Thornbury records office for ten years."],
        [["Record", "Kept"], ["Invoice", "7 years"]],
    )
    excel = documents.excel_file("Vehicles", [["Vehicle", "Plate", "Parking bay"], ["Van", "KX-114", "Bay 12"]])
    deck = documents.powerpoint_file(
        [("Welcome", CAFETERIA), ("Rollout", "The Lumen badge readers are installed in the Osaka office in May.")]
    )
    return {
        "archive.doc": documents.libreoffice_convert({"archive.odt": word}, "doc")["archive.odt"],
        "vehicles.xls": documents.libreoffice_convert({"vehicles.xlsx": excel}, "xls")["vehicles.xlsx"],
        "rollout.ppt": documents.libreoffice_convert({"rollout.pptx": deck}, "ppt")["rollout.pptx"],
    }


def samples() -> list[Sample]:
    price_rows = [["Item", "Price", "Stock"], *([f"Widget {n}", f"{n * 100} yen", str(n)] for n in range(1, 36))]
    kestrel = documents.ruled_table_pdf("Kestrel shop price list", [["Item", "Price"], ["Brass lamp", "7 euros"]])
    nav = "".join(f'<li><a href="/p{i}">Zephyr menu item {i}</a></li>' for i in range(30))
    return [
        Sample(
            "expense-form.pdf",
            lambda: documents.scanned_pdf(
                [
                    f"Cafeteria notes\n{CAFETERIA}",
                    ["経費精算申請書", "申請者：山田太郎　所属：営業部", "宿泊費の上限は一泊一万二千円とする。"],
                ]
            ),
            "宿泊費の上限はいくらですか",
            "一万二千円",
            page=2,
        ),
        Sample(
            "allowance.png",
            lambda: documents.image_bytes(
                ["Expense claim form", "The hotel allowance is 180 dollars per night."], "PNG"
            ),
            "What is the hotel allowance per night?",
            "180 dollars",
            page=1,
        ),
        Sample(
            "shinkansen.jpg",
            lambda: documents.image_bytes(["出張規程", "出張の交通費は新幹線の指定席を利用できる。"], "JPEG"),
            "出張で新幹線の指定席は使えますか",
            "指定席",
            page=1,
        ),
        Sample(
            "fax.tiff",
            lambda: documents.multipage_tiff(
                [["Fax cover sheet", CAFETERIA], ["The Orbis visitor badge costs 12 euros."]]
            ),
            "How much does the Orbis visitor badge cost?",
            "12 euros",
            page=2,
        ),
        Sample(
            "vault.webp",
            lambda: documents.image_bytes(["The Quillon vault opens at 7 am on weekdays."], "WEBP"),
            "When does the Quillon vault open?",
            "7 am",
            page=1,
        ),
        Sample(
            "price-list.pdf",
            lambda: documents.ruled_table_pdf("Price list of the Halden shop", price_rows),
            "What is the price of Widget 27?",
            "Widget 27 | 2700 yen",
            page=1,
        ),
        Sample(
            "newsletter.pdf",
            lambda: documents.two_column_pdf(
                [
                    "The left column is about the cafeteria,",
                    "which serves lunch from noon until two",
                    "o'clock on every working day of the",
                    "week, holidays excepted for the staff.",
                ],
                [
                    "The right column is about parking.",
                    "Permits for the Quellin garage cost",
                    "35 euros a month and are sold by the",
                    "facilities desk on the ground floor.",
                ],
                "Facilities newsletter",
            ),
            "How much does a permit for the Quellin garage cost?",
            "Permits for the Quellin garage cost\n35 euros a month",
            page=1,
        ),
        Sample(
            "archive.doc",
            lambda: legacy_office()["archive.doc"],
            "How long does the Thornbury records office archive signed contracts?",
            "ten years",
            heading=("Archive rules",),
        ),
        Sample(
            "vehicles.xls",
            lambda: legacy_office()["vehicles.xls"],
            "Which parking bay does the van with plate KX-114 use?",
            "KX-114",
            heading=("Vehicles",),
        ),
        Sample(
            "rollout.ppt",
            lambda: legacy_office()["rollout.ppt"],
            "When are the Lumen badge readers installed in Osaka?",
            "Lumen badge readers",
            heading=("Rollout",),
            page=2,
        ),
        Sample(
            "remote-work.rtf",
            lambda: documents.rtf_file(
                "在宅勤務規程", [CAFETERIA, "在宅勤務は所属長の承認を得て週3日まで行うことができる。"]
            ),
            "在宅勤務は週に何日までできますか",
            "週3日",
        ),
        Sample(
            "onboarding.odt",
            lambda: documents.odt_file(
                "Onboarding", [CAFETERIA, "New hires collect their Marlin laptop from the IT kiosk."]
            ),
            "Where do new hires collect their Marlin laptop?",
            "IT kiosk",
            heading=("Onboarding",),
        ),
        Sample(
            "rooms.ods",
            lambda: documents.ods_file({"Rooms": [["Room", "Seats"], ["Tarn meeting room", "14 seats"]]}),
            "How many seats does the Tarn meeting room have?",
            "Tarn meeting room",
            heading=("Rooms",),
        ),
        Sample(
            "kickoff.odp",
            lambda: documents.odp_file(
                [("Welcome", CAFETERIA), ("Kickoff", "The Vesper project kickoff is on 3 April.")]
            ),
            "When is the Vesper project kickoff?",
            "3 April",
            heading=("Kickoff",),
            page=2,
        ),
        Sample(
            "handbook.epub",
            lambda: documents.epub_file(
                "Handbook", [("Meals", CAFETERIA), ("Security", "Lost Corvid keycards are blocked within one hour.")]
            ),
            "How fast are lost Corvid keycards blocked?",
            "one hour",
            heading=("Security",),
        ),
        Sample(
            "prices.eml",
            lambda: documents.mail_file(
                "Kestrel shop prices",
                f"Hello team,\n\n{CAFETERIA}\n\nThe price list is attached.",
                {"kestrel.pdf": (kestrel, "application/pdf")},
            ),
            "What is the price of a brass lamp in the Kestrel shop?",
            "Brass lamp | 7 euros",
            heading=("Kestrel shop prices", "Attachment: kestrel.pdf"),
            page=1,
        ),
        Sample(
            "badges.msg",
            lambda: outlook_message(
                "Visitor badges",
                "Hanako Sato",
                "team@example.com",
                f"{CAFETERIA}\n\nVisitor badges from the Kestrel front desk are valid for 9 hours.",
            ),
            "How long is a visitor badge from the Kestrel front desk valid?",
            "9 hours",
            heading=("Visitor badges",),
        ),
        Sample(
            "policy.html",
            (
                f"<html><body><header><nav><ul>{nav}</ul></nav></header><main><h1>Badge policy</h1>"
                f"<p>{CAFETERIA}</p><h2>Lost badges</h2><p>Lost Harbor badges are replaced by security within "
                "one working day.</p></main><footer>© 2026 Zephyr Corp. All rights reserved.</footer></body></html>"
            ).encode,
            "How quickly are lost Harbor badges replaced?",
            "one working day",
            heading=("Badge policy", "Lost badges"),
        ),
    ]


SAMPLES = samples()


@pytest.fixture(scope="module")
def documents_kb(ragkb: RunningRagkb, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("documents")
    kb_id = ragkb.create_kb("documents")
    ids = {"kb_id": kb_id}
    for sample in SAMPLES:
        path = folder / sample.filename
        path.write_bytes(sample.build())
        ids[sample.filename] = str(ragkb.upload_file(kb_id, path)["id"])
    for sample in SAMPLES:
        done = ragkb.wait_document(kb_id, ids[sample.filename])
        assert done["status"] == "done", (sample.filename, done)
        ids[f"report:{sample.filename}"] = str(done["ingest_report"])
    return ids


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.filename for s in SAMPLES])
def test_a_question_finds_its_answer_in_each_document(
    ragkb: RunningRagkb, documents_kb: dict[str, str], sample: Sample
) -> None:
    top = ragkb.search(sample.question, [documents_kb["kb_id"]])[0]
    assert top["document_id"] == documents_kb[sample.filename], top
    assert sample.answer in top["text"], top["text"]
    if sample.heading is not None:
        assert tuple(top["heading_path"]) == sample.heading, top["heading_path"]
    if sample.page is not None:
        assert top["page"] == sample.page, top


def test_ocr_confidence_is_in_the_ingest_report(ragkb: RunningRagkb, documents_kb: dict[str, str]) -> None:
    document = ragkb.client.get(
        f"/v1/knowledge-bases/{documents_kb['kb_id']}/documents/{documents_kb['expense-form.pdf']}"
    ).json()
    ocr = document["ingest_report"]["ocr"]
    assert ocr["pages"] == [2]  # page 1 has a text layer: only the scan is OCRed
    assert ocr["mean_confidence"] > 70


def test_a_table_row_travels_with_its_header(ragkb: RunningRagkb, documents_kb: dict[str, str]) -> None:
    top = ragkb.search("price of Widget 31", [documents_kb["kb_id"]])[0]
    assert top["text"].startswith("Item | Price | Stock")
    assert "Widget 31 | 3100 yen" in top["text"]


def test_web_page_boilerplate_is_not_indexed(ragkb: RunningRagkb, documents_kb: dict[str, str]) -> None:
    results = ragkb.search("Zephyr menu item rights reserved", [documents_kb["kb_id"]], top_k=20)
    assert all("Zephyr menu item" not in r["text"] and "rights reserved" not in r["text"] for r in results)


# -- OCR off ----------------------------------------------------------------------------------------------------


def test_a_kb_with_ocr_off_fails_scans_and_images_with_that_reason(ragkb: RunningRagkb, tmp_path: Path) -> None:
    response = ragkb.client.post("/v1/knowledge-bases", json={"name": "no-ocr", "chunking": {"ocr": False}})
    assert response.status_code == 201, response.text
    kb_id = str(response.json()["id"])
    for name, content, reason in [
        ("scan.pdf", documents.scanned_pdf([["The Quillon vault opens at 7 am."]]), "no text layer"),
        ("scan.png", documents.image_bytes(["The Quillon vault opens at 7 am."], "PNG"), "OCR is off"),
    ]:
        path = tmp_path / name
        path.write_bytes(content)
        failed = ragkb.wait_document(kb_id, str(ragkb.upload_file(kb_id, path)["id"]))
        assert failed["status"] == "failed" and reason in failed["error"], failed


# -- hostile files of each new type -----------------------------------------------------------------------------


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def billion_laughs_odf(media_type: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", media_type)
        archive.writestr(
            "content.xml",
            '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>'
            "<office:document-content>&b;</office:document-content>",
        )
    return buffer.getvalue()


def lying_epub() -> bytes:
    """An EPUB whose chapter holds more than its recorded size (the directory and local header lie)."""
    data = bytearray(documents.epub_file("Guide", [("Meals", CAFETERIA * 20)]))
    info = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo("OEBPS/text/chapter0.xhtml")
    smaller = struct.pack("<I", info.file_size // 2)
    data[info.header_offset + 22 : info.header_offset + 26] = smaller
    position = bytes(data).find(b"PK\x01\x02")
    while position != -1:
        length = struct.unpack_from("<H", data, position + 28)[0]
        if bytes(data[position + 46 : position + 46 + length]) == b"OEBPS/text/chapter0.xhtml":
            data[position + 24 : position + 28] = smaller
        position = bytes(data).find(b"PK\x01\x02", position + 4)
    return bytes(data)


def nested_mail(depth: int) -> bytes:
    mail = b"From: a@example.com\nSubject: deep\nMIME-Version: 1.0\n"
    for level in range(depth):
        mail += f'Content-Type: multipart/mixed; boundary="b{level}"\n\n--b{level}\n'.encode()
    return (
        mail + b"Content-Type: text/plain\n\nhello\n" + b"".join(f"--b{i}--\n".encode() for i in reversed(range(depth)))
    )


HOSTILE = [
    (
        "bomb.png",
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 100_000, 100_000, 8, 0, 0, 0, 0))
        + png_chunk(b"IDAT", b"")
        + png_chunk(b"IEND", b""),
        "too large to decode",
    ),
    ("broken.jpg", b"\xff\xd8\xff\xe0" + b"\x13" * 200, "image cannot be read"),
    ("broken.tiff", b"II*\x00" + b"\xff" * 200, "image cannot be read"),
    ("broken.webp", b"RIFF\x40\x00\x00\x00WEBPVP8 " + b"\x01" * 60, "image cannot be read"),
    ("not-word.doc", compound_file({"Contents": b"not a Word document" * 10}), "not a Word 97–2003 (.doc) file"),
    ("not-excel.xls", compound_file({"Contents": b"not a workbook" * 10}), "Excel 97–2003 (.xls) file"),
    ("not-powerpoint.ppt", compound_file({"Pictures": b"no slides" * 10}), "not a PowerPoint 97–2003 (.ppt) file"),
    ("laughs.odt", billion_laughs_odf("application/vnd.oasis.opendocument.text"), "declares a DTD"),
    ("laughs.ods", billion_laughs_odf("application/vnd.oasis.opendocument.spreadsheet"), "declares a DTD"),
    ("laughs.odp", billion_laughs_odf("application/vnd.oasis.opendocument.presentation"), "declares a DTD"),
    ("lying.epub", lying_epub(), "larger than its recorded size"),
    ("deep.eml", nested_mail(3000), "nested too deeply"),
    ("truncated.msg", outlook_message("x", "y", "z", "body " * 2000)[:3000], "Outlook (.msg) file is damaged"),
    ("empty.rtf", b"{\\rtf1\\ansi }", "contains no text"),
]


@pytest.mark.parametrize("hostile", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_file_of_each_new_type_fails_with_what_is_wrong(
    ragkb: RunningRagkb, documents_kb: dict[str, str], tmp_path: Path, hostile: tuple[str, bytes, str]
) -> None:
    filename, content, reason = hostile
    path = tmp_path / filename
    path.write_bytes(content)
    accepted = ragkb.upload_file(documents_kb["kb_id"], path)
    failed = ragkb.wait_document(documents_kb["kb_id"], str(accepted["id"]))
    assert failed["status"] == "failed", failed
    assert reason in failed["error"], failed["error"]
    assert "internal error" not in failed["error"]
