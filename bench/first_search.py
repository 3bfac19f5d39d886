"""How long each KB's first search takes after the stack restarts (a deploy, a crash): what the first user of
every KB waits for. One private stack (`ragkb_cli.stack`), --kbs KBs of --points scaled SciFact chunks each
(bench/scale.py, written through the retriever's internal API, optimised), then per round and arm, in
alternating order: the whole stack restarted with the arm's settings, --wait-s seconds after it answers
`/ready`, one hybrid search per KB (each its own SciFact question), then a second search per KB (other
questions): the first shows what loading the KB's index costs its first question, the second the steady state.
Every question is new to the restarted retriever, so each is embedded (its query-vector cache starts empty).
An arm is a name and the stack's settings, e.g. another checkout's retriever first on `PYTHONPATH`:

    python bench/first_search.py --kbs 3 --points 20000 --rounds 2 \\
        --arms "before:PYTHONPATH=/other/services/retriever/src" now
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import scale
from common import DATA, REPO, read_jsonl, save_result, split_arm

from ragkb_cli.stack import PrivateStack, private_stack

TOP_K = 10


def build_kbs(stack: PrivateStack, kbs: int, points: int, optimize_idle_s: float) -> list[str]:
    base = scale.load_base(1000)
    retriever = scale.retriever_client(stack.address.retriever_url, stack.address.service_token)
    kb_ids = []
    with client(stack) as http:
        for number in range(kbs):
            kb_id = scale.create_kb(http, f"first-search-{number}")
            write_s = scale.write_points(retriever, kb_id, points, base, seed=number + 1)
            print(f"KB {number}: {points} points written in {write_s:.0f} s", flush=True)
            kb_ids.append(kb_id)
        for kb_id in kb_ids:
            # Searched until settled: each KB's HNSW graph is built before the restarts measure its load.
            body = search_body(kb_id, "warm up")
            scale.wait_until_optimized(lambda body=body: timed(http, body)[0], optimize_idle_s)
    retriever.close()
    return kb_ids


def client(stack: PrivateStack) -> httpx.Client:
    return httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.admin_key}"}, timeout=120)


def search_body(kb_id: str, query: str) -> dict[str, Any]:
    return {"query": query, "knowledge_base_ids": [kb_id], "top_k": TOP_K, "mode": "hybrid", "rerank": False}


def timed(http: httpx.Client, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    response = http.post("/v1/search", json=body)
    elapsed_ms = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return elapsed_ms, answer


def searches_after_restart(
    stack: PrivateStack, kb_ids: list[str], questions: list[str], wait_s: float
) -> dict[str, Any]:
    stack.restart()
    time.sleep(wait_s)
    rows: dict[str, list[dict[str, float]]] = {"first": [], "second": []}
    with client(stack) as http:
        http.get("/v1/knowledge-bases").raise_for_status()  # the api's own first request, outside the timings
        for which, offset in (("first", 0), ("second", len(kb_ids))):
            for number, kb_id in enumerate(kb_ids):
                http_ms, answer = timed(http, search_body(kb_id, questions[offset + number]))
                rows[which].append({"http_ms": http_ms, "took_ms": answer["took_ms"], **answer.get("timings_ms", {})})
    return rows


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({key for row in rows for key in row})
    return {key: round(statistics.median(row[key] for row in rows if key in row), 2) for key in keys}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Each KB's first hybrid search after a stack restart: {result['kbs']} KBs of {result['points']} scaled "
        f"SciFact chunks, {result['rounds']} rounds, arms alternating, {result['wait_s']:g} s after ready. "
        "Medians over KBs and rounds, ms.",
        "",
        "| arm | search | HTTP | took | embed | analyze | retrieve |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["summary"]:
        for which in ("first", "second"):
            m = row[which]
            lines.append(
                f"| {row['arm']} | {which} | {m['http_ms']} | {m['took_ms']} | {m.get('embed', '–')} | "
                f"{m.get('analyze', '–')} | {m.get('retrieve', '–')} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", default=["now"], help="NAME[:KEY=VALUE,...] each")
    parser.add_argument("--kbs", type=int, default=3)
    parser.add_argument("--points", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--wait-s", type=float, default=0.0, help="seconds between ready and the first search")
    parser.add_argument("--optimize-idle-s", type=float, default=10.0)
    parser.add_argument("--label", default="run")
    args = parser.parse_args()
    questions = [query["text"] for query in read_jsonl(DATA / "scifact" / "queries.jsonl")][: 2 * args.kbs]
    arms = [split_arm(arm) for arm in args.arms]
    runs: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="ragkb-first-search-") as workdir,
        private_stack(REPO, Path(workdir)) as stack,
    ):
        base_env = dict(stack.env)
        kb_ids = build_kbs(stack, args.kbs, args.points, args.optimize_idle_s)
        for round_number in range(args.rounds):
            for name, env in arms if round_number % 2 == 0 else list(reversed(arms)):
                stack.env.clear()
                stack.env.update(base_env | env)
                rows = searches_after_restart(stack, kb_ids, questions, args.wait_s)
                runs.append({"arm": name, "round": round_number, **rows})
                print(name, round_number, {which: medians(found) for which, found in rows.items()}, flush=True)
    summary = [
        {
            "arm": name,
            **{
                which: medians([row for run in runs if run["arm"] == name for row in run[which]])
                for which in ("first", "second")
            },
        }
        for name, _ in arms
    ]
    result = {**vars(args), "runs": runs, "summary": summary}
    save_result(f"first-search-{args.label}", result, markdown(result))


if __name__ == "__main__":
    main()
