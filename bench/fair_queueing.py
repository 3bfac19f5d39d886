"""Fair queueing: how long a single upload into one KB takes to be `done` while another KB's bulk import is
queued, with the two lanes (RAGKB_JOBS__FAIR_QUEUEING=true, the default) and with one FIFO queue (false).

For each mode it starts a private stack (ragkb_cli.stack: deploy/launcher.py on free ports, a temporary
directory and a redis-server of its own), uploads --documents SciFact documents into KB A through the batch
endpoint (50 a request: bulk work), and once every batch is accepted sends --uploads single documents into KB
B, one every --interval-s seconds, each timed from its POST until GET says `done`. The import is not waited
for once the uploads are done (in FIFO mode they are done only when the import nearly is).

    python bench/fair_queueing.py [--documents 2000] [--uploads 5] [--interval-s 2] [--modes lanes fifo] [--env K=V ...]

Results: bench/results/fair-queueing.json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from common import DATA, REPO, read_jsonl, save_result, settings_of
from ingest import upload_all

from ragkb_cli.stack import private_stack

MODES = {"lanes": "true", "fifo": "false"}
UPLOAD_TEXT = "Note {n}: the loading dock of building {n} opens at seven and closes at five."
POLL_S = 0.2


def measure_mode(mode: str, documents: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    overrides = {"RAGKB_JOBS__FAIR_QUEUEING": MODES[mode], **settings_of(args.env)}
    with (
        tempfile.TemporaryDirectory(prefix="ragkb-bench-") as workdir,
        private_stack(REPO, Path(workdir), **overrides) as stack,
    ):
        headers = {"Authorization": f"Bearer {stack.address.admin_key}"}
        with httpx.Client(base_url=stack.address.api_url, headers=headers, timeout=120) as http:
            return run_scenario(http, documents, args) | {"mode": mode}


def run_scenario(http: httpx.Client, documents: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    importing, uploading = create_kb(http, "bench-fair-import"), create_kb(http, "bench-fair-upload")
    started = time.monotonic()
    upload_all(http, importing, documents, workers=2)
    queued_s = time.monotonic() - started
    print(f"  import of {len(documents)} documents queued in {queued_s:.1f} s", flush=True)
    times: list[float] = []
    threads = []
    for n in range(args.uploads):
        thread = threading.Thread(target=lambda n=n: times.append(time_one_upload(http, uploading, n, args.timeout_s)))
        thread.start()
        threads.append(thread)
        time.sleep(args.interval_s)
    for thread in threads:
        thread.join()
    counts = http.get(f"/v1/knowledge-bases/{importing}").json()["document_counts"]
    print(f"  single uploads done after {sorted(round(t, 2) for t in times)} s; import: {counts}", flush=True)
    return {
        "upload_to_done_s": sorted(round(value, 2) for value in times),
        "median_s": round(statistics.median(times), 2),
        "import_done_when_uploads_were": counts["done"],
        "import_waiting_when_uploads_were": counts["pending"] + counts["processing"],
    }


def create_kb(http: httpx.Client, name: str) -> str:
    response = http.post("/v1/knowledge-bases", json={"name": name})
    response.raise_for_status()
    return str(response.json()["id"])


def time_one_upload(http: httpx.Client, kb_id: str, n: int, timeout_s: float) -> float:
    started = time.monotonic()
    response = http.post(
        f"/v1/knowledge-bases/{kb_id}/documents", files={"file": (f"note-{n}.md", UPLOAD_TEXT.format(n=n).encode())}
    )
    response.raise_for_status()
    document_id = response.json()["id"]
    while time.monotonic() - started < timeout_s:
        status = http.get(f"/v1/knowledge-bases/{kb_id}/documents/{document_id}").json()["status"]
        if status in ("done", "failed"):
            assert status == "done", f"the upload failed: {status}"
            return time.monotonic() - started
        time.sleep(POLL_S)
    raise SystemExit(f"upload {n} not done after {timeout_s} s")


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Single uploads into KB B while {result['documents']:,} SciFact documents of KB A are queued "
        f"({result['uploads']} uploads, one every {result['interval_s']} s)",
        "",
        "| mode | upload → done (s), each | median (s) | A's documents done / still waiting then |",
        "|---|---|---|---|",
    ]
    for row in result["modes"]:
        each = ", ".join(f"{value:g}" for value in row["upload_to_done_s"])
        lines.append(
            f"| {row['mode']} | {each} | {row['median_s']:g} | "
            f"{row['import_done_when_uploads_were']} / {row['import_waiting_when_uploads_were']} |"
        )
    if "fifo_over_lanes" in result:
        lines += ["", f"FIFO median ÷ lanes median: {result['fifo_over_lanes']:g}×"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=2000, help="SciFact documents of KB A's bulk import")
    parser.add_argument("--uploads", type=int, default=5, help="single uploads into KB B")
    parser.add_argument("--interval-s", type=float, default=2.0, help="seconds between the single uploads")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="how long one upload may take")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--env", nargs="*", default=[], help="further settings of the stack, KEY=VALUE")
    args = parser.parse_args()
    documents = list(read_jsonl(DATA / "scifact" / "corpus.jsonl"))[: args.documents]
    rows = []
    for mode in args.modes:
        print(f"{mode}:", flush=True)
        rows.append(measure_mode(mode, documents, args))
    result: dict[str, Any] = {
        "documents": len(documents),
        "uploads": args.uploads,
        "interval_s": args.interval_s,
        "env": args.env,
        "modes": rows,
    }
    medians = {row["mode"]: row["median_s"] for row in rows}
    if {"lanes", "fifo"} <= medians.keys():
        result["fifo_over_lanes"] = round(medians["fifo"] / medians["lanes"], 1)
    save_result("fair-queueing", result, markdown(result))


if __name__ == "__main__":
    main()
