"""Short documents alone against short documents in batches (RAGKB_BATCHING__DOCUMENTS), same corpus, same run.

Each round starts one private stack per arm (`ragkb_cli.stack`, a Redis of its own, the arms in alternating
order), warms its task processes, uploads the first N documents of a collection through the batch endpoint and
times them until every one is `done`. After the rounds, the model alone on the same chunks (bench/ingest.py's
raw encode rate) gives each arm's efficiency = pipeline chunks/s ÷ raw chunks/s. Results:
bench/results/batching-ab-<corpus>.json and .md.

    python bench/batching_ab.py [--corpus jsquad] [--documents 400] [--arms 1 16] [--rounds 2]

An arm may also carry settings of its own: `--arms 8 8:RAGKB_EMBEDDING__MAX_PADDING_SHARE=1` compares one
setting at the same batch size (`ARM:KEY=VALUE[,KEY=VALUE]`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import httpx
from common import DATA, REPO, read_jsonl, save_result, settings_of, split_arm
from ingest import raw_encode_rate
from ingest_profile import ingest, warm_up
from processes import stack_processes

from ragkb_cli.stack import private_stack


def parse_arm(arm: str) -> tuple[int, dict[str, str]]:
    """`8` or `8:KEY=VALUE,KEY=VALUE`: the batch size and the arm's own settings."""
    size, settings = split_arm(arm)
    return int(size), settings


def run_arm(documents: list[dict[str, Any]], arm: str, extra_env: dict[str, str]) -> dict[str, Any]:
    batch_documents, arm_env = parse_arm(arm)
    with (
        tempfile.TemporaryDirectory(prefix="ragkb-batching-ab-") as workdir,
        private_stack(
            REPO, Path(workdir), RAGKB_BATCHING__DOCUMENTS=str(batch_documents), **(extra_env | arm_env)
        ) as stack,
        httpx.Client(
            base_url=stack.address.api_url, headers={"Authorization": f"Bearer {stack.address.admin_key}"}, timeout=120
        ) as http,
    ):
        warm_up(http)
        processes = stack_processes(int(stack.env["RAGKB_API__PORT"]))
        cpu_before = cpu_seconds(processes)
        kb_id, _, seconds = ingest(http, documents)
        cpu = {role: round(cpu_seconds(processes)[role] - cpu_before[role], 2) for role in cpu_before}
        items = http.get(f"/v1/knowledge-bases/{kb_id}/documents", params={"limit": 1000}).json()
    chunks = sum(item["chunk_count"] for item in items)
    batch_sizes = [item["ingest_report"].get("batch_documents", 1) for item in items]
    return {
        "arm": arm,
        "batch_documents": batch_documents,
        "seconds": round(seconds, 2),
        "documents_per_s": round(len(documents) / seconds, 2),
        "chunks": chunks,
        "chunks_per_s": round(chunks / seconds, 2),
        "failed": sum(item["status"] != "done" for item in items),
        "mean_batch": round(statistics.fmean(batch_sizes), 2),
        # CPU time of the stack's processes per document: what a busy machine's wall clock hides.
        "cpu_ms_per_document": {role: round(1000 * s / len(documents), 1) for role, s in cpu.items()},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def cpu_seconds(processes: dict[int, str]) -> dict[str, float]:
    """User + system CPU seconds of the processes, added up per role (the worker's task processes included)."""
    ticks = os.sysconf("SC_CLK_TCK")
    totals = dict.fromkeys(sorted(set(processes.values())), 0.0)
    for pid, role in processes.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        totals[role] += (int(fields[11]) + int(fields[12])) / ticks
    return totals


def markdown(result: dict[str, Any]) -> str:
    raw = result["raw_encode"]["chunks_per_s"]
    lines = [
        f"{result['corpus']}: first {result['documents']} documents, arms {result['arms']}, {result['rounds']} rounds "
        f"(alternating order); raw encode of the same chunks {raw} chunks/s",
        "",
        "| round | arm | docs/s | chunks/s | efficiency | mean batch | failed | load | CPU ms per document |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in result["runs"]:
        lines.append(
            f"| {run['round']} | {run['arm']} | {run['documents_per_s']} | {run['chunks_per_s']} | "
            f"{run['chunks_per_s'] / raw:.2f} | {run['mean_batch']} | {run['failed']} | {run['load_average'][0]} | "
            + ", ".join(f"{role.removeprefix('ragkb_')} {ms}" for role, ms in run["cpu_ms_per_document"].items())
            + " |"
        )
    lines += [
        "",
        "| arm | median docs/s | docs/s ratio to the first arm (per round, median) | median worker CPU ms per doc |",
        "|---|---|---|---|",
    ]
    for arm, summary in result["summary"].items():
        lines.append(
            f"| {arm} | {summary['median_documents_per_s']} | {summary['ratio_to_first']} | "
            f"{summary['median_worker_cpu_ms']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="jsquad")
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument(
        "--arms", nargs="+", default=["1", "16"], help="RAGKB_BATCHING__DOCUMENTS of each arm[:KEY=VALUE,...]"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--env", nargs="*", default=[], help="further settings of every stack, KEY=VALUE")
    parser.add_argument("--label", default="", help="added to the result files' name")
    args = parser.parse_args()
    documents = list(read_jsonl(DATA / args.corpus / "corpus.jsonl"))[: args.documents]
    extra_env = settings_of(args.env)
    runs = []
    for round_number in range(args.rounds):
        arms = args.arms if round_number % 2 == 0 else list(reversed(args.arms))
        for arm in arms:
            run = run_arm(documents, arm, extra_env) | {"round": round_number}
            print(run, flush=True)
            runs.append(run)
    summary = {}
    for arm in args.arms:
        own = [run for run in runs if run["arm"] == arm]
        ratios = [
            run["documents_per_s"]
            / next(r for r in runs if r["round"] == run["round"] and r["arm"] == args.arms[0])["documents_per_s"]
            for run in own
        ]
        summary[arm] = {
            "median_documents_per_s": round(statistics.median(r["documents_per_s"] for r in own), 2),
            "ratio_to_first": round(statistics.median(ratios), 3),
            "median_worker_cpu_ms": round(
                statistics.median(r["cpu_ms_per_document"].get("ragkb_worker", 0.0) for r in own), 1
            ),
        }
    result = {
        "corpus": args.corpus,
        "documents": len(documents),
        "arms": args.arms,
        "rounds": args.rounds,
        "env": extra_env,
        "runs": runs,
        "summary": summary,
        "raw_encode": raw_encode_rate(documents, 1000),
    }
    save_result("-".join(filter(None, ("batching-ab", args.corpus, args.label))), result, markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
