"""How long the first document uploaded to a stack that has just started takes to be `done`: what a team sees
after `make run`, a deploy or a worker restart. Each run starts a private stack (`ragkb_cli.stack`: the launcher,
a Redis of its own), waits until it answers `/ready` and then `--wait-s` more seconds, creates a KB, uploads
one short Markdown document and polls it (every 20 ms) until it is `done`. Arms are compared in alternating
order; an arm is a name and the stack's settings, e.g. another checkout's packages first on `PYTHONPATH`:

    python bench/first_upload.py --rounds 2 --wait-s 0 10 \
        --arms "before:PYTHONPATH=/other/libs/store/src:/other/services/worker/src:/other/services/api/src" now
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from common import REPO, save_result, split_arm

from ragkb_cli.stack import private_stack

NOTE = "# Expenses\n\nReceipts are uploaded within 30 days of the trip; the finance team pays them monthly."


def first_upload_seconds(env: dict[str, str], wait_s: float) -> float:
    with (
        tempfile.TemporaryDirectory(prefix="ragkb-first-upload-") as workdir,
        private_stack(REPO, Path(workdir), **env) as stack,
        httpx.Client(
            base_url=stack.address.api_url, headers={"Authorization": f"Bearer {stack.address.admin_key}"}, timeout=60
        ) as http,
    ):
        time.sleep(wait_s)
        kb = http.post("/v1/knowledge-bases", json={"name": "first-upload"})
        kb.raise_for_status()
        kb_id = kb.json()["id"]
        started = time.perf_counter()
        response = http.post(f"/v1/knowledge-bases/{kb_id}/documents", json={"source_id": "expenses.md", "text": NOTE})
        response.raise_for_status()
        path = f"/v1/knowledge-bases/{kb_id}/documents/{response.json()['id']}"
        while (status := http.get(path).json()["status"]) not in ("done", "failed"):
            time.sleep(0.02)
        seconds = time.perf_counter() - started
        if status != "done":
            raise SystemExit(f"the document ended {status}")
        return seconds


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"First upload to a stack just started: {result['rounds']} rounds, arms in alternating order",
        "",
        "| arm | seconds after ready | seconds to `done`, each round | median |",
        "|---|---|---|---|",
    ]
    for row in result["summary"]:
        runs = ", ".join(f"{s:.2f}" for s in row["seconds"])
        lines.append(f"| {row['arm']} | {row['wait_s']:g} | {runs} | {row['median_s']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", default=["now"], help="NAME[:KEY=VALUE,...] each")
    parser.add_argument("--wait-s", nargs="+", type=float, default=[0.0, 10.0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--label", default="run")
    args = parser.parse_args()
    runs = []
    for round_number in range(args.rounds):
        arms = args.arms if round_number % 2 == 0 else list(reversed(args.arms))
        for wait_s in args.wait_s:
            for arm in arms:
                name, env = split_arm(arm)
                seconds = first_upload_seconds(env, wait_s)
                runs.append({"arm": name, "wait_s": wait_s, "round": round_number, "seconds": round(seconds, 3)})
                print(runs[-1], flush=True)
    summary = []
    for arm in args.arms:
        name = split_arm(arm)[0]
        for wait_s in args.wait_s:
            own = [run["seconds"] for run in runs if run["arm"] == name and run["wait_s"] == wait_s]
            summary.append({"arm": name, "wait_s": wait_s, "seconds": own, "median_s": statistics.median(own)})
    result = {"arms": args.arms, "rounds": args.rounds, "runs": runs, "summary": summary}
    save_result(f"first-upload-{args.label}", result, markdown(result))


if __name__ == "__main__":
    main()
