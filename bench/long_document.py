"""A long PDF across worker processes: wall time with 2 task processes against 1, the chunks of both runs, and
the chunks and search quality of the same file built unsplit.

A text PDF of --pages pages is generated with reportlab (page N holds SciFact document N: its title, then its
abstract cut to --page-chars characters, and a page number at the foot). Each configuration runs on a private
stack of its own (bench/fair_queueing.py does the same): a few short documents first, so that every task
process has loaded its model, then one upload of the PDF, timed from the POST until the document is `done`,
its progress (ranges built) polled meanwhile and the memory of every process of the stack sampled
(bench/processes.py). The configurations alternate, each round in another order, so that a change in the
machine's load falls on all of them; `--unsplit` adds a run with the split off (what ragkb did before) to each
round. After each run the document's points are read back from the retriever and compared across runs:
ordinal, text, page, heading path, offsets and BM25 terms must be equal (a chunk's id is uuid5 of the KB,
source_id, version and ordinal: equal ordinals under the same source_id and version give the same ids), dense
vectors within a float tolerance. Search quality: every SciFact training claim whose judged document is one of
the PDF's pages is searched in the document's KB; recall@10 counts the claims whose page is among the hits'.

    python bench/long_document.py [--pages 1000] [--rounds 2] [--unsplit] [--threads 1]

Results: bench/results/long-document.json and .md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from common import DATA, REPO, read_jsonl, read_qrels, save_result
from ingest_profile import warm_up
from processes import ProcessMemory
from pydantic import SecretStr
from reportlab.lib.pagesizes import A4
from reportlab.lib.utils import simpleSplit
from reportlab.pdfgen import canvas

from ragkb_cli.stack import private_stack
from ragkb_core.retriever_client import RetrieverClient
from ragkb_core.settings import RetrieverClientSettings

POLL_S = 1.0
SOURCE_ID = "manual.pdf"
# Dense vectors of the same chunk embedded in different batches differ in the last bits (padding changes the
# ONNX Runtime kernels' summation order); anything beyond this is a different chunk.
DENSE_TOLERANCE = 1e-4


def write_pdf(path: Path, documents: list[dict[str, Any]], page_chars: int) -> None:
    width, height = A4
    pdf = canvas.Canvas(str(path), pagesize=A4)
    for number, document in enumerate(documents, start=1):
        y = height - 60
        pdf.setFont("Helvetica-Bold", 12)
        pdf.drawString(50, y, (document.get("title") or document["_id"])[:90])
        pdf.setFont("Helvetica", 10)
        for line in simpleSplit(document["text"][:page_chars], "Helvetica", 10, width - 100):
            y -= 13
            if y < 60:
                break
            pdf.drawString(50, y, line)
        pdf.drawString(width / 2, 30, str(number))
        pdf.showPage()
    pdf.save()


def run_once(label: str, pdf: Path, overrides: dict[str, str], questions: list[tuple[str, int]]) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="ragkb-bench-long-") as workdir,
        private_stack(REPO, Path(workdir), **overrides) as stack,
    ):
        headers = {"Authorization": f"Bearer {stack.address.admin_key}"}
        with httpx.Client(base_url=stack.address.api_url, headers=headers, timeout=120) as http:
            warm_up(http)
            memory = ProcessMemory(int(stack.env["RAGKB_API__PORT"]))
            memory.start()
            kb_id, document, seconds, progress = ingest(http, pdf)
            peak = memory.stop()
            recall = recall_at_10(http, kb_id, questions)
        retriever = RetrieverClient(
            RetrieverClientSettings(url=stack.address.retriever_url, timeout_s=120),
            SecretStr(stack.env["RAGKB_SERVICE_TOKEN"]),
        )
        points = retriever.export_document(kb_id, document["id"], document["version"])
        retriever.close()
    result = {
        "label": label,
        "seconds": round(seconds, 1),
        "status": document["status"],
        "chunks": document["chunk_count"],
        "ranges": document.get("ranges"),
        "progress_seen": progress,
        "stage_timings": document["stage_timings"],
        "recall_at_10": recall,
        "memory": peak,
        "load_average": os.getloadavg(),
    }
    print(
        f"  {label}: {seconds:.1f} s, {document['chunk_count']} chunks, ranges {document.get('ranges')}, "
        f"recall@10 {recall}, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return result | {"_points": points.model_dump()}


def ingest(http: httpx.Client, pdf: Path) -> tuple[str, dict[str, Any], float, list[int]]:
    kb = http.post("/v1/knowledge-bases", json={"name": "bench-long-document"})
    kb.raise_for_status()
    kb_id = str(kb.json()["id"])
    started = time.monotonic()
    with pdf.open("rb") as handle:
        response = http.post(
            f"/v1/knowledge-bases/{kb_id}/documents",
            files={"file": (pdf.name, handle, "application/pdf")},
            data={"source_id": SOURCE_ID},
        )
    response.raise_for_status()
    document_id = response.json()["id"]
    progress: list[int] = []
    while True:
        document = http.get(f"/v1/knowledge-bases/{kb_id}/documents/{document_id}").json()
        ranges = document.get("ranges")
        if ranges and (not progress or progress[-1] != ranges["done"]):
            progress.append(ranges["done"])
        if document["status"] in ("done", "failed"):
            return kb_id, document, time.monotonic() - started, progress
        time.sleep(POLL_S)


def recall_at_10(http: httpx.Client, kb_id: str, questions: list[tuple[str, int]]) -> float:
    found = 0
    for query, page in questions:
        response = http.post("/v1/search", json={"query": query, "knowledge_base_ids": [kb_id], "top_k": 10})
        response.raise_for_status()
        found += any(hit.get("page") == page for hit in response.json()["results"])
    return round(found / max(1, len(questions)), 4)


def chunk_fields(points: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Everything of each chunk but its dense vector, in ordinal order."""
    return [
        (c["ordinal"], c["text"], c["page"], tuple(c["heading_path"]), c["char_start"], c["char_end"],
         tuple(c["sparse"]["indices"]), tuple(round(v, 6) for v in c["sparse"]["values"]))
        for c in sorted(points["chunks"], key=lambda c: c["ordinal"])
    ]  # fmt: skip


def compare(reference: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    same_fields = chunk_fields(reference) == chunk_fields(other)
    dense_a = np.array([c["dense"] for c in sorted(reference["chunks"], key=lambda c: c["ordinal"])])
    dense_b = np.array([c["dense"] for c in sorted(other["chunks"], key=lambda c: c["ordinal"])])
    max_diff = float(np.abs(dense_a - dense_b).max()) if dense_a.shape == dense_b.shape else None
    return {
        "same_chunks": same_fields,
        "dense_max_abs_diff": max_diff,
        "dense_within_tolerance": max_diff is not None and max_diff <= DENSE_TOLERANCE,
    }


def questions_on_pages(data: Path, pages: int) -> list[tuple[str, int]]:
    """SciFact training claims judged relevant to one of the first `pages` documents, with that page."""
    page_of = {document["_id"]: number for number, document in enumerate(read_corpus(data, pages), start=1)}
    claims = {row["_id"]: row["text"] for row in read_jsonl(data / "scifact" / "queries.jsonl")}
    qrels = read_qrels(data / "scifact" / "qrels" / "train.tsv")
    return [
        (claims[query_id], page_of[doc_id])
        for query_id, judged in qrels.items()
        for doc_id in judged
        if doc_id in page_of and query_id in claims
    ]


def read_corpus(data: Path, pages: int) -> list[dict[str, Any]]:
    documents = []
    for document in read_jsonl(data / "scifact" / "corpus.jsonl"):
        documents.append(document)
        if len(documents) == pages:
            break
    return documents


def table(runs: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    lines = [
        "| run | processes | wall s | chunks | ranges | recall@10 (page) | peak PSS api / retriever / worker MB "
        "| peak RSS per task process MB | load avg (1 min) at end |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        by_role = run["memory"].get("pss_mb_peak_by_role", {})
        tasks = [p["rss_mb_peak"] for p in run["memory"].get("processes", []) if p["role"] == "ragkb_worker"]
        lines.append(
            f"| {run['label']} | {run['processes']} | {run['seconds']} | {run['chunks']} | "
            f"{(run['ranges'] or {}).get('total', '—')} | {run['recall_at_10']} | "
            f"{by_role.get('ragkb_api')} / {by_role.get('ragkb_retriever')} / {by_role.get('ragkb_worker')} | "
            f"{', '.join(str(t) for t in sorted(tasks))} | {run['load_average'][0]:.1f} |"
        )
    lines.append("")
    lines.append(
        f"ratio 2 processes ÷ 1 (median wall time): **{summary['ratio_2_to_1']}** (per round: "
        f"{summary['ratio_2_to_1_per_round']}); chunks identical between all "
        f"split runs: {summary['split_runs_identical']}; split vs unsplit: {summary.get('split_vs_unsplit')}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--data", type=Path, default=DATA, help="the folder holding scifact/ (BEIR layout)")
    parser.add_argument("--page-chars", type=int, default=1000, help="abstract characters per page")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (1 process, 2 processes), alternated")
    parser.add_argument("--unsplit", action="store_true", help="also one run with the split off (1 process)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="ONNX Runtime threads per task process (RAGKB_EMBEDDING__THREADS; 0 = one per core, the default)",
    )
    parser.add_argument("--only", type=int, choices=(1, 2), help="one split run with this many processes only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ragkb-long-pdf-") as folder:
        pdf = Path(folder) / "manual.pdf"
        write_pdf(pdf, read_corpus(args.data, args.pages), args.page_chars)
        print(f"{args.pages}-page PDF: {pdf.stat().st_size / 1e6:.1f} MB", flush=True)
        questions = questions_on_pages(args.data, args.pages)
        base = {"RAGKB_EMBEDDING__THREADS": str(args.threads)}
        configurations = [("split, 1 process", 1, {}), ("split, 2 processes", 2, {})]
        if args.unsplit:
            configurations.append(("unsplit, 1 process", 1, {"RAGKB_LONG_DOCUMENTS__ENABLED": "false"}))
        plan = []
        for round_number in range(0 if args.only else args.rounds):
            # Each round in another order, so that no configuration always runs first (or last) in a round.
            shift = round_number % len(configurations)
            plan += configurations[shift:] + configurations[:shift]
        if args.only:
            plan.append((f"split, {args.only} process{'es' if args.only > 1 else ''}", args.only, {}))
        runs = []
        for label, processes, extra in plan:
            overrides = base | extra | {"RAGKB_TASKS__CONCURRENCY": str(processes)}
            runs.append(run_once(label, pdf, overrides, questions) | {"processes": processes})
    split = [run for run in runs if run["label"].startswith("split")]
    one = [run["seconds"] for run in split if run["processes"] == 1]
    two = [run["seconds"] for run in split if run["processes"] == 2]
    summary: dict[str, Any] = {
        "ratio_2_to_1": round(statistics.median(two) / statistics.median(one), 3) if one and two else None,
        # Each round's runs were close together: their ratio sees the least change of the machine's load.
        "ratio_2_to_1_per_round": [round(b / a, 3) for a, b in zip(one, two, strict=False)],
        "ratio_unsplit_to_split_1_per_round": [
            round(u["seconds"] / a, 3)
            for a, u in zip(one, [r for r in runs if r["label"].startswith("unsplit")], strict=False)
        ],
        "split_runs_identical": [compare(split[0]["_points"], run["_points"]) for run in split[1:]],
        "questions": len(questions),
        "threads_per_process": args.threads,
        "pages": args.pages,
        "page_chars": args.page_chars,
    }
    unsplit = [run for run in runs if run["label"].startswith("unsplit")]
    if unsplit and split:
        summary["split_vs_unsplit"] = compare(unsplit[0]["_points"], split[0]["_points"])
    for run in runs:
        run.pop("_points")
    name = "long-document" if args.pages == 1000 and not args.only else f"long-document-{args.pages}"
    name += f"-threads-{args.threads}" if args.threads != 1 else ""
    save_result(name, {"summary": summary, "runs": runs}, table(runs, summary))


if __name__ == "__main__":
    main()
