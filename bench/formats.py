"""Ingestion throughput per document format, OCR included, through the public API of a live service.

Builds real files from SciFact abstracts (four abstracts per file: one per PDF page, slide, Word heading,
Markdown/HTML section or spreadsheet block) and, for the Japanese scans, from JSQuAD contexts; uploads each
format into one KB, waits until the format's files are settled, and reports end-to-end chunks/s and pages/s,
plus each stage's share of worker time and the parse stage's own pages/s (OCR: Tesseract's pages/s). The
writers are the tests' (tests/support/documents.py): LibreOffice for .doc/.xls/.ppt, Pillow and reportlab for
scans and images.

    python bench/formats.py [--files-per-format 30] [--formats pdf,scan-pdf,...] [--url http://127.0.0.1:8000]
"""

from __future__ import annotations

import argparse
import html
import io
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import docx
import openpyxl
import pptx
from common import DATA, REPO, client, delete_kb, find_kb, read_jsonl, save_result
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas

sys.path.insert(0, str(REPO))
from tests.support import documents  # the tests' writers, from the repository root
from tests.support.compound_file import outlook_message

ABSTRACTS_PER_FILE = 4
Section = tuple[str, str]  # (title, text)


def as_text(sections: list[Section]) -> bytes:
    return "\n\n".join(f"{title}\n\n{text}" for title, text in sections).encode()


def as_markdown(sections: list[Section]) -> bytes:
    return "\n\n".join(f"## {title}\n\n{text}" for title, text in sections).encode()


def as_html(sections: list[Section]) -> bytes:
    body = "".join(f"<h2>{html.escape(t)}</h2><p>{html.escape(x)}</p>" for t, x in sections)
    return f"<html><body>{body}</body></html>".encode()


def as_docx(sections: list[Section]) -> bytes:
    document = docx.Document()
    for title, text in sections:
        document.add_heading(title, level=1)
        document.add_paragraph(text)
    return _saved(document)


def as_pptx(sections: list[Section]) -> bytes:
    deck = pptx.Presentation()
    for title, text in sections:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = text
    return _saved(deck)


def as_xlsx(sections: list[Section]) -> bytes:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.append(["title", "sentence"])
    for title, text in sections:
        for sentence in text.split(". "):
            sheet.append([title, sentence])
    return _saved(workbook)


def as_pdf(sections: list[Section]) -> bytes:
    buffer = io.BytesIO()
    drawing = canvas.Canvas(buffer, pagesize=A4)
    for title, text in sections:
        lines = [title, "", *_wrap(text, 95)]
        y = 800
        for line in lines:
            drawing.drawString(50, y, line)
            y -= 14
        drawing.showPage()
    drawing.save()
    return buffer.getvalue()


def _wrap(text: str, width: int) -> list[str]:
    lines: list[str] = []
    current = ""
    for word in text.split():
        if len(current) + len(word) + 1 > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}".strip()
    return [*lines, current]


def _saved(document: Any) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _scan_lines(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width) or [text]


def as_scanned_pdf(sections: list[Section]) -> bytes:
    """One scanned page (an image, no text layer) per abstract."""
    return documents.scanned_pdf([[title[:60], *_scan_lines(text, 70)][:40] for title, text in sections])


def as_scanned_japanese_pdf(sections: list[Section]) -> bytes:
    return documents.scanned_pdf([[title[:30], *_scan_lines(text, 38)][:40] for title, text in sections])


def as_png(sections: list[Section]) -> bytes:
    title, text = sections[0]
    image = documents.text_image([title[:60], *_scan_lines(text, 70)][:40])
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def as_tiff(sections: list[Section]) -> bytes:
    frames = [documents.text_image([t[:60], *_scan_lines(x, 70)][:40]) for t, x in sections]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="TIFF", save_all=True, append_images=frames[1:], compression="tiff_deflate")
    return buffer.getvalue()


def as_odt(sections: list[Section]) -> bytes:
    return documents.odt_file(sections[0][0], [text for _, text in sections])


def as_ods(sections: list[Section]) -> bytes:
    rows = [["title", "sentence"], *([t, sentence] for t, x in sections for sentence in x.split(". "))]
    return documents.ods_file({"Abstracts": rows})


def as_odp(sections: list[Section]) -> bytes:
    return documents.odp_file(sections)


def as_rtf(sections: list[Section]) -> bytes:
    return documents.rtf_file(sections[0][0], [f"{t}. {x}" for t, x in sections])


def as_epub(sections: list[Section]) -> bytes:
    return documents.epub_file(sections[0][0], [(html.escape(t), html.escape(x)) for t, x in sections])


def as_eml(sections: list[Section]) -> bytes:
    return documents.mail_file(sections[0][0][:80], "\n\n".join(f"{t}\n{x}" for t, x in sections))


def as_msg(sections: list[Section]) -> bytes:
    body = "\n\n".join(f"{t}\n{x}" for t, x in sections)
    return outlook_message(sections[0][0][:80], "Bench", "team@example.com", body)


# Formats LibreOffice writes from another (the suffix of the file the writer below makes).
LEGACY_SOURCE = {"doc": ".docx", "xls": ".xlsx", "ppt": ".pptx"}

# name → (file suffix, writer of one file from its sections)
FORMATS: dict[str, tuple[str, Callable[[list[Section]], bytes]]] = {
    "txt": (".txt", as_text),
    "md": (".md", as_markdown),
    "html": (".html", as_html),
    "docx": (".docx", as_docx),
    "pdf": (".pdf", as_pdf),
    "pptx": (".pptx", as_pptx),
    "xlsx": (".xlsx", as_xlsx),
    "odt": (".odt", as_odt),
    "ods": (".ods", as_ods),
    "odp": (".odp", as_odp),
    "epub": (".epub", as_epub),
    "eml": (".eml", as_eml),
    "msg": (".msg", as_msg),
    "rtf": (".rtf", as_rtf),
    "doc": (".doc", as_docx),
    "xls": (".xls", as_xlsx),
    "ppt": (".ppt", as_pptx),
    "scan-pdf": (".pdf", as_scanned_pdf),
    "scan-ja-pdf": (".pdf", as_scanned_japanese_pdf),
    "png": (".png", as_png),
    "tiff": (".tiff", as_tiff),
}
# Formats whose pages are known: one per abstract (a PNG holds one).
PAGED = {"pdf", "pptx", "odp", "ppt", "scan-pdf", "scan-ja-pdf", "tiff", "png"}
JAPANESE = {"scan-ja-pdf"}


def build_files(name: str, files: list[list[Section]]) -> list[bytes]:
    suffix, build = FORMATS[name]
    payloads = [build(sections) for sections in files]
    if name in LEGACY_SOURCE:
        source = LEGACY_SOURCE[name]
        named = {f"{name}-{n}{source}": payload for n, payload in enumerate(payloads)}
        converted = documents.libreoffice_convert(named, suffix[1:])
        payloads = [converted[f"{name}-{n}{source}"] for n in range(len(payloads))]
    return payloads


def ingest_format(http: Any, kb_id: str, extension: str, files: list[list[Section]]) -> dict[str, Any]:
    payloads = build_files(extension, files)
    pages = len(files) if extension == "png" else len(files) * ABSTRACTS_PER_FILE
    started = time.perf_counter()
    ids = []
    for number, payload in enumerate(payloads):
        name = f"{extension}-{number}{FORMATS[extension][0]}"
        response = http.post(f"/v1/knowledge-bases/{kb_id}/documents", files={"file": (name, payload)})
        response.raise_for_status()
        ids.append(response.json()["id"])
    settled = _wait(http, kb_id, set(ids))
    seconds = time.perf_counter() - started
    return _summary(extension, settled, seconds, sum(len(p) for p in payloads), pages)


def _wait(http: Any, kb_id: str, ids: set[str]) -> list[dict[str, Any]]:
    while True:
        documents = [d for d in http.get(f"/v1/knowledge-bases/{kb_id}/documents").json() if d["id"] in ids]
        if all(d["status"] in ("done", "failed") for d in documents):
            return documents
        time.sleep(0.5)


def _summary(extension: str, settled: list[dict[str, Any]], seconds: float, size: int, pages: int) -> dict[str, Any]:
    stages: dict[str, float] = {}
    for document in settled:
        for stage, spent in document["stage_timings"].items():
            stages[stage] = stages.get(stage, 0.0) + spent
    chunks = sum(d["chunk_count"] for d in settled)
    worker = sum(stages.values()) or 1.0
    paged = pages if extension in PAGED else None
    confidences = [
        d["ingest_report"]["ocr"]["mean_confidence"]
        for d in settled
        if d["status"] == "done" and (d.get("ingest_report") or {}).get("ocr", {}).get("mean_confidence") is not None
    ]
    return {
        "format": extension,
        "files": len(settled),
        "failed": sum(d["status"] == "failed" for d in settled),
        "errors": sorted({d["error"] for d in settled if d["status"] == "failed"})[:3],
        "megabytes": round(size / 1e6, 2),
        "pages": paged,
        "chunks": chunks,
        "seconds": round(seconds, 1),
        "chunks_per_s": round(chunks / seconds, 2),
        "pages_per_s": round(paged / seconds, 2) if paged else None,
        "parse_pages_per_s": round(paged / stages["parse"], 2) if paged and stages.get("parse") else None,
        "ocr_mean_confidence": round(sum(confidences) / len(confidences), 1) if confidences else None,
        "stage_share": {stage: round(spent / worker, 3) for stage, spent in stages.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--files-per-format", type=int, default=30)
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated names, e.g. pdf,scan-pdf")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.formats.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(FORMATS))
    if unknown:
        raise SystemExit(f"unknown formats: {', '.join(unknown)} (known: {', '.join(FORMATS)})")

    corpus = list(read_jsonl(DATA / "scifact" / "corpus.jsonl"))
    japanese = list(read_jsonl(DATA / "jsquad" / "corpus.jsonl"))
    http = client(args.url)
    if (existing := find_kb(http, "bench-formats")) is not None:
        delete_kb(http, existing["id"])
    kb_id = http.post("/v1/knowledge-bases", json={"name": "bench-formats"}).json()["id"]
    rows = []
    for offset, extension in enumerate(chosen):
        first = offset * args.files_per_format * ABSTRACTS_PER_FILE
        source = japanese if extension in JAPANESE else corpus
        abstracts = source[first : first + args.files_per_format * ABSTRACTS_PER_FILE]
        sections = [(a.get("title") or a["_id"], a["text"]) for a in abstracts]
        files = [sections[i : i + ABSTRACTS_PER_FILE] for i in range(0, len(sections), ABSTRACTS_PER_FILE)]
        rows.append(ingest_format(http, kb_id, extension, files))
        print(rows[-1], flush=True)
    path = save_result("ingest-formats", {"files_per_format": args.files_per_format, "formats": rows})
    print(
        "| format | files | failed | pages | chunks | s | chunks/s | pages/s | parse pages/s | OCR conf. | "
        "parse / chunk / embed / index |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        share = row["stage_share"]
        shares = " / ".join(f"{share.get(s, 0):.1%}" for s in ("parse", "chunk", "embed", "index"))
        print(
            f"| {row['format']} | {row['files']} | {row['failed']} | {row['pages'] or '–'} | {row['chunks']} | "
            f"{row['seconds']} | {row['chunks_per_s']} | {row['pages_per_s'] or '–'} | "
            f"{row['parse_pages_per_s'] or '–'} | {row['ocr_mean_confidence'] or '–'} | {shares} |"
        )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
