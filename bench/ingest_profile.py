"""Where a short document's ingestion time goes, per process and per stage: model time against everything else.

Starts a private stack (`ragkb_cli.stack`, a Redis of its own), warms every task process, then uploads the first
N documents of a collection through the batch endpoint while py-spy samples every process of the stack (the
worker's task processes, the retriever, the api) with idle threads included. Each sample of a task process is
put in one stage by the frames on its stack (model, parse, chunk, BM25, ledger, blob store, retriever HTTP,
Celery between tasks…); the retriever's by its write path. Also reports each document's own stage timings
(`stage_timings`), and the end-to-end rate. Results: bench/results/ingest-profile-<label>.json and .md, and the
raw py-spy samples beside them.

    python bench/ingest_profile.py [--corpus jsquad] [--documents 300] [--py-spy PATH] [--env KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from common import DATA, REPO, RESULTS, read_jsonl, save_result, settings_of, warm_up
from ingest import raw_encode_rate
from processes import parent_of, stack_processes

from ragkb_cli.stack import private_stack

# Stages of a task process, the first whose marker is on a sample's stack (innermost frame first) wins.
# A marker is a substring of py-spy's "function (file)" frame text.
WORKER_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model (embed_passages)", ("embed_passages",)),
    ("BM25 encode", ("encode_document",)),
    ("retriever HTTP: write_document", ("write_document",)),
    ("retriever HTTP: delete_document", ("delete_document",)),
    ("blob store", ("blobs.py",)),
    ("ledger: claim", ("claim (ragkb_store", "claim_first (ragkb_store", "claim_companions (ragkb_store")),
    ("ledger: renew", ("renew (ragkb_store", "renew_many (ragkb_store")),
    (
        "ledger: finish / text / unreferenced",
        ("finish (ragkb_store", "finish_many (ragkb_store", "text_sha256_of", "unreferenced_blobs"),
    ),
    ("ledger: other", ("ragkb_store/ledger",)),
    ("parse", ("parse (ragkb_worker/parsing", "parsers/")),
    ("chunk", ("chunking.py",)),
    ("points / pydantic", ("document_points", "pydantic")),
    ("pipeline other", ("pipeline.py",)),
    ("task wrapper (failures, metrics)", ("run_ingest", "run_with_policy", "record_ingested")),
    ("celery: between tasks", ("celery/", "billiard/", "kombu/")),
)
RETRIEVER_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("write: Qdrant Edge upsert", ("upsert",)),
    ("write: flush", ("flush",)),
    ("delete_document", ("delete",)),
    ("write: other indexing", ("indexing.py",)),
    ("request handling (Litestar, msgspec, pydantic)", ("litestar/", "pydantic", "msgspec", "routes.py")),
    ("server loop (uvicorn, asyncio)", ("uvicorn/", "asyncio/", "anyio/")),
)


# Innermost frames of a thread waiting for work: the event loop's select, an executor thread's queue get, the
# retriever's shard maintainer between flushes, locks, sleeps and socket reads.
IDLE_FRAMES = (
    "select",
    "poll",
    "recv",
    "wait",
    "sleep",
    "accept",
    "read (",
    "_worker (concurrent/futures/thread.py",
    "ShardMaintainer._run (",
)


def stage_of(stack: str, stages: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    frames = stack.split(";")
    for frame in reversed(frames):
        for name, markers in stages:
            if any(marker in frame for marker in markers):
                return name
    return "other"


def is_idle_wait(stack: str) -> bool:
    """A thread blocked in a wait of its own (a socket read, a lock, a sleep): py-spy --idle marks nothing, so
    recognise the innermost frame."""
    innermost = stack.rsplit(";", 1)[-1]
    return any(word in innermost for word in IDLE_FRAMES)


def read_samples(path: Path) -> Counter[str]:
    """py-spy's raw format: one `frame;frame;… count` line per distinct stack (outermost first)."""
    counts: Counter[str] = Counter()
    if not path.exists():
        return counts
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            counts[stack] += int(count)
    return counts


def main_thread_only(counts: Counter[str]) -> Counter[str]:
    """A task process runs its task on the main thread (prefork); other threads (metrics, heartbeats) are not
    the document's time."""
    return Counter({stack: n for stack, n in counts.items() if "MainThread" in stack.split(";", 1)[0] or
                    stack.split(";", 1)[0].startswith("process")})  # fmt: skip


def tabulate(counts: Counter[str], stages: tuple[tuple[str, tuple[str, ...]], ...]) -> dict[str, int]:
    table: Counter[str] = Counter()
    for stack, n in counts.items():
        table[stage_of(stack, stages)] += n
    return dict(table.most_common())


def ingest(http: httpx.Client, documents: list[dict[str, Any]]) -> tuple[str, float, float]:
    kb = http.post("/v1/knowledge-bases", json={"name": "profile"})
    kb.raise_for_status()
    kb_id = str(kb.json()["id"])
    started = time.perf_counter()
    for start in range(0, len(documents), 50):
        items = [
            {"source_id": d["_id"], "title": d.get("title") or d["_id"], "text": d["text"]}
            for d in documents[start : start + 50]
        ]
        http.post(f"/v1/knowledge-bases/{kb_id}/documents/batch", json={"documents": items}).raise_for_status()
    uploaded = time.perf_counter() - started
    while True:
        counts = http.get(f"/v1/knowledge-bases/{kb_id}").json()["document_counts"]
        if counts["done"] + counts["failed"] >= len(documents):
            return kb_id, uploaded, time.perf_counter() - started
        time.sleep(0.2)


def run(args: argparse.Namespace) -> dict[str, Any]:
    documents = list(read_jsonl(DATA / args.corpus / "corpus.jsonl"))[: args.documents]
    overrides = settings_of(args.env)
    samples_dir = RESULTS / f"ingest-profile-{args.label}-samples"
    shutil.rmtree(samples_dir, ignore_errors=True)
    samples_dir.mkdir(parents=True)
    with (
        tempfile.TemporaryDirectory(prefix="ragkb-ingest-profile-") as workdir,
        private_stack(REPO, Path(workdir), **overrides) as stack,
        httpx.Client(
            base_url=stack.address.api_url,
            headers={"Authorization": f"Bearer {stack.address.admin_key}"},
            timeout=120,
        ) as http,
    ):
        warm_up(http)
        processes = stack_processes(int(stack.env["RAGKB_API__PORT"]))
        # Celery's task processes are the worker processes whose parent is the worker.
        task_pids = {pid for pid, role in processes.items() if processes.get(parent_of(pid)) == "ragkb_worker"}
        spies = {}
        for pid, role in processes.items():
            out = samples_dir / f"{role}-{pid}.txt"
            command = [args.py_spy, "record", "-p", str(pid), "--idle", "--threads", "--nonblocking",
                       "-r", str(args.rate), "-f", "raw", "-o", str(out)]  # fmt: skip
            spies[pid] = (role, out, subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        time.sleep(1.0)  # py-spy attaches
        kb_id, upload_seconds, seconds = ingest(http, documents)
        for _, _, spy in spies.values():
            spy.send_signal(signal.SIGINT)
        for _, _, spy in spies.values():
            spy.wait(timeout=60)
        listed = http.get(f"/v1/knowledge-bases/{kb_id}/documents", params={"limit": 1000}).json()
    items = listed["items"] if isinstance(listed, dict) else listed
    chunks = sum(item["chunk_count"] for item in items)
    timings: Counter[str] = Counter()
    for item in items:
        timings.update(item.get("stage_timings") or {})
    per_process = {}
    task_processes: Counter[str] = Counter()
    for pid, (role, out, _) in spies.items():
        counts = read_samples(out)
        if pid in task_pids:
            task_processes.update(tabulate(main_thread_only(counts), WORKER_STAGES))
        if role == "ragkb_worker":
            counts = main_thread_only(counts)
            table = tabulate(counts, WORKER_STAGES)
        elif role == "ragkb_retriever":
            busy = Counter({s: n for s, n in counts.items() if not is_idle_wait(s)})
            table = tabulate(busy, RETRIEVER_STAGES) | {"idle (waiting)": sum(counts.values()) - sum(busy.values())}
        else:
            busy = Counter({s: n for s, n in counts.items() if not is_idle_wait(s)})
            table = {"busy": sum(busy.values()), "idle (waiting)": sum(counts.values()) - sum(busy.values())}
        per_process[f"{role}-{pid}"] = {"role": role, "samples": sum(counts.values()), "stages": table}
    # The model alone on the same chunks, after the stack stopped (bench/ingest.py's measure): the efficiency.
    raw = raw_encode_rate(documents, len(documents)) if args.raw else None
    return {
        "raw_encode": raw,
        "efficiency": None if raw is None else round(chunks / seconds / raw["chunks_per_s"], 3),
        "corpus": args.corpus,
        "documents": len(documents),
        "chunks": chunks,
        "seconds": round(seconds, 2),
        "upload_seconds": round(upload_seconds, 2),
        "documents_per_s": round(len(documents) / seconds, 2),
        "chunks_per_s": round(chunks / seconds, 2),
        "rate_hz": args.rate,
        "env": overrides,
        "document_stage_seconds": {k: round(v, 2) for k, v in timings.items()},
        "task_processes": dict(task_processes.most_common()),
        "processes": per_process,
        "load_average": os.getloadavg(),
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['corpus']}: {result['documents']} documents, {result['chunks']} chunks in {result['seconds']} s "
        f"({result['documents_per_s']} docs/s, {result['chunks_per_s']} chunks/s; raw encode "
        f"{(result['raw_encode'] or {}).get('chunks_per_s')} chunks/s, efficiency {result['efficiency']}), "
        f"env {result['env']}, "
        f"load {result['load_average']}",
        "",
        "Documents' own stage seconds (sum): "
        + ", ".join(f"{k} {v}" for k, v in result["document_stage_seconds"].items()),
        "",
    ]
    docs = result["documents"]
    tasks = result["task_processes"]
    whole = sum(tasks.values()) or 1
    lines += ["**Task processes together** (main threads; ms per document = samples ÷ rate ÷ documents)", "",
              "| stage | samples | share | ms per document |", "|---|---|---|---|"]  # fmt: skip
    for stage, n in tasks.items():
        lines.append(f"| {stage} | {n} | {n / whole:.1%} | {1000 * n / result['rate_hz'] / docs:.1f} |")
    lines.append("")
    for name, process in result["processes"].items():
        total = process["samples"] or 1
        lines += [f"**{name}** ({process['samples']} samples at {result['rate_hz']} Hz)", "",
                  "| stage | samples | share | ms per document |", "|---|---|---|---|"]  # fmt: skip
        for stage, n in process["stages"].items():
            ms = 1000 * n / result["rate_hz"] / docs
            lines.append(f"| {stage} | {n} | {n / total:.1%} | {ms:.1f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="jsquad")
    parser.add_argument("--documents", type=int, default=300)
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or str(REPO / ".venv" / "bin" / "py-spy"))
    parser.add_argument("--env", nargs="*", default=[], help="settings of the stack, KEY=VALUE")
    parser.add_argument("--label", default="run")
    parser.add_argument("--raw", action="store_true", help="also time the model alone on the same chunks")
    args = parser.parse_args()
    result = run(args)
    save_result(f"ingest-profile-{args.label}", result, markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
