"""The api's CPU per document of a batch upload, two checkouts side by side, alternating batch by batch.

    python bench/batch_upload_ab.py --baseline /work/main [--corpus jsquad] [--documents 400] [--batch 100]
        [--rounds 2] [--label L]

Starts one api process per checkout (bench/api_layer_ab.py's start_api: BASELINE/.venv runs BASELINE's code, each
on its own SQLite database and KB, behind one stand-in retriever), both sending their ingest messages to a
redis-server of this run's own that no worker reads (the upload is the point, not the ingestion). Each round
uploads the first N documents of the collection (source_ids new to the round) through the batch endpoint in
batches of B, the two checkouts in turns, batch by batch (the first in turn alternating between rounds), and
reads each api's CPU time (/proc, every thread) around each of its requests.
Results: bench/results/batch-upload-ab[-LABEL].json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from api_layer_ab import KB_ID, Api, stand_in_retriever, start_api
from common import DATA, REPO, read_jsonl, save_result
from profile_search import cpu_seconds

from ragkb_cli.stack import free_port

WARM_UP_DOCUMENTS = 20


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
    process = subprocess.Popen(command, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            return process, f"redis://127.0.0.1:{port}/0"
        except redis.ConnectionError:
            time.sleep(0.05)
    raise SystemExit("redis-server did not start")


def batches(documents: list[dict[str, Any]], size: int, prefix: str) -> list[list[dict[str, Any]]]:
    items = [
        {"source_id": f"{prefix}{d['_id']}", "title": d.get("title") or d["_id"], "text": d["text"]} for d in documents
    ]
    return [items[start : start + size] for start in range(0, len(items), size)]


def upload(api: Api, batch: list[dict[str, Any]]) -> tuple[float, float]:
    """CPU seconds of the api and wall seconds for one batch."""
    cpu, started = cpu_seconds(api.process.pid), time.perf_counter()
    response = api.http.post(f"/v1/knowledge-bases/{KB_ID}/documents/batch", json={"documents": batch}, timeout=120)
    if response.status_code != 200 or response.json()["failed"]:
        raise SystemExit(f"{api.name}: {response.status_code} {response.text[:300]}")
    return cpu_seconds(api.process.pid) - cpu, time.perf_counter() - started


def measure(apis: list[Api], documents: list[dict[str, Any]], size: int, rounds: int) -> list[dict[str, Any]]:
    for api in apis:
        for batch in batches(documents[:WARM_UP_DOCUMENTS], size, "warm-"):
            upload(api, batch)
    measured = []
    for number in range(rounds):
        cpu = {api.name: 0.0 for api in apis}
        wall: dict[str, list[float]] = {api.name: [] for api in apis}
        for position, batch in enumerate(batches(documents, size, f"r{number}-")):
            for api in apis if (number + position) % 2 == 0 else reversed(apis):
                seconds, elapsed = upload(api, batch)
                cpu[api.name] += seconds
                wall[api.name].append(elapsed)
        measured.append(
            {
                "round": number + 1,
                "cpu_ms_per_document": {name: round(1000 * s / len(documents), 2) for name, s in cpu.items()},
                "wall_ms_per_batch": {name: round(1000 * statistics.fmean(w), 1) for name, w in wall.items()},
            }
        )
    return measured


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Batch uploads, {result['corpus']}: {result['documents']} documents per round in batches of "
        f"{result['batch']}, the api alone (no worker), baseline `{result['baseline']}` against this checkout, "
        f"alternating batch by batch. Load average {result['load_average']} → {result['load_average_end']}.",
        "",
        "| round | baseline CPU ms/doc | this CPU ms/doc | ratio | baseline ms/batch | this ms/batch |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["rounds"]:
        cpu, wall = row["cpu_ms_per_document"], row["wall_ms_per_batch"]
        lines.append(
            f"| {row['round']} | {cpu['baseline']} | {cpu['this']} | {round(cpu['this'] / cpu['baseline'], 2)} | "
            f"{wall['baseline']} | {wall['this']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout with its own .venv")
    parser.add_argument("--corpus", default="jsquad")
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    documents = list(read_jsonl(DATA / args.corpus / "corpus.jsonl"))[: args.documents]
    retriever_port = free_port()
    stand_in_retriever(retriever_port)
    load = Path("/proc/loadavg").read_text().split()[0]
    apis: list[Api] = []
    with tempfile.TemporaryDirectory(prefix="ragkb-batch-upload-ab-") as tmp:
        broker, redis_url = start_redis(Path(tmp))
        try:
            for name, repo in (("baseline", args.baseline), ("this", REPO)):
                workdir = Path(tmp) / name
                workdir.mkdir()
                apis.append(start_api(name, repo, workdir, retriever_port, grant="write", redis_url=redis_url))
            rounds = measure(apis, documents, args.batch, args.rounds)
        finally:
            for api in apis:
                api.http.close()
                api.process.terminate()
                api.process.wait()
            broker.terminate()
            broker.wait()
    result = {
        "baseline": str(args.baseline),
        "corpus": args.corpus,
        "documents": len(documents),
        "batch": args.batch,
        "load_average": load,
        "load_average_end": Path("/proc/loadavg").read_text().split()[0],
        "rounds": rounds,
    }
    save_result(f"batch-upload-ab-{args.label}" if args.label else "batch-upload-ab", result, markdown(result))


if __name__ == "__main__":
    main()
