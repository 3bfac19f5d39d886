"""Ingestion throughput per document format, through the public API of a live service.

Builds real files from SciFact abstracts (four abstracts per file: one per PDF page, slide, Word heading,
Markdown/HTML section or spreadsheet block), uploads each format into one KB, waits until the format's files
are settled, and reports end-to-end chunks/s and pages/s, plus each stage's share of worker time.

    python bench/formats.py [--files-per-format 30] [--url http://127.0.0.1:8000]
"""

from __future__ import annotations

import argparse
import html
import io
import time
from collections.abc import Callable
from typing import Any

import docx
import openpyxl
import pptx
from common import DATA, client, delete_kb, find_kb, read_jsonl, save_result
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas

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


FORMATS: dict[str, Callable[[list[Section]], bytes]] = {
    "txt": as_text,
    "md": as_markdown,
    "html": as_html,
    "docx": as_docx,
    "pdf": as_pdf,
    "pptx": as_pptx,
    "xlsx": as_xlsx,
}
PAGED = {"pdf", "pptx"}


def ingest_format(http: Any, kb_id: str, extension: str, files: list[list[Section]]) -> dict[str, Any]:
    build = FORMATS[extension]
    payloads = [build(sections) for sections in files]
    started = time.perf_counter()
    ids = []
    for number, payload in enumerate(payloads):
        name = f"{extension}-{number}.{extension}"
        response = http.post(f"/v1/knowledge-bases/{kb_id}/documents", files={"file": (name, payload)})
        response.raise_for_status()
        ids.append(response.json()["id"])
    documents = _wait(http, kb_id, set(ids))
    seconds = time.perf_counter() - started
    return _summary(extension, documents, seconds, sum(len(p) for p in payloads), len(files) * ABSTRACTS_PER_FILE)


def _wait(http: Any, kb_id: str, ids: set[str]) -> list[dict[str, Any]]:
    while True:
        documents = [d for d in http.get(f"/v1/knowledge-bases/{kb_id}/documents").json() if d["id"] in ids]
        if all(d["status"] in ("done", "failed") for d in documents):
            return documents
        time.sleep(0.5)


def _summary(
    extension: str, documents: list[dict[str, Any]], seconds: float, size: int, sections: int
) -> dict[str, Any]:
    stages: dict[str, float] = {}
    for document in documents:
        for stage, spent in document["stage_timings"].items():
            stages[stage] = stages.get(stage, 0.0) + spent
    chunks = sum(d["chunk_count"] for d in documents)
    worker = sum(stages.values()) or 1.0
    pages = sections if extension in PAGED else None
    return {
        "format": extension,
        "files": len(documents),
        "failed": sum(d["status"] == "failed" for d in documents),
        "megabytes": round(size / 1e6, 2),
        "pages": pages,
        "chunks": chunks,
        "seconds": round(seconds, 1),
        "chunks_per_s": round(chunks / seconds, 2),
        "pages_per_s": round(pages / seconds, 2) if pages else None,
        "parse_pages_per_s": round(pages / stages["parse"], 1) if pages and stages.get("parse") else None,
        "stage_share": {stage: round(spent / worker, 3) for stage, spent in stages.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--files-per-format", type=int, default=30)
    args = parser.parse_args()

    corpus = list(read_jsonl(DATA / "scifact" / "corpus.jsonl"))
    http = client(args.url)
    if (existing := find_kb(http, "bench-formats")) is not None:
        delete_kb(http, existing["id"])
    kb_id = http.post("/v1/knowledge-bases", json={"name": "bench-formats"}).json()["id"]
    rows = []
    for offset, extension in enumerate(FORMATS):
        first = offset * args.files_per_format * ABSTRACTS_PER_FILE
        abstracts = corpus[first : first + args.files_per_format * ABSTRACTS_PER_FILE]
        sections = [(a.get("title") or a["_id"], a["text"]) for a in abstracts]
        files = [sections[i : i + ABSTRACTS_PER_FILE] for i in range(0, len(sections), ABSTRACTS_PER_FILE)]
        rows.append(ingest_format(http, kb_id, extension, files))
        print(rows[-1], flush=True)
    path = save_result("ingest-formats", {"files_per_format": args.files_per_format, "formats": rows})
    print(
        "| format | files | pages | chunks | s | chunks/s | pages/s | parse pages/s | parse / chunk / embed / index |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        share = row["stage_share"]
        shares = " / ".join(f"{share.get(s, 0):.1%}" for s in ("parse", "chunk", "embed", "index"))
        print(
            f"| {row['format']} | {row['files']} | {row['pages'] or '–'} | {row['chunks']} | {row['seconds']} | "
            f"{row['chunks_per_s']} | {row['pages_per_s'] or '–'} | {row['parse_pages_per_s'] or '–'} | {shares} |"
        )
    print(f"saved {path}")


if __name__ == "__main__":
    main()
