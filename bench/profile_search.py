"""Where one search spends its time: a stage table and flame graphs of the api and the retriever.

    python bench/profile_search.py [--points 10000] [--queries 300] [--top-k 10 100] [--mode keyword] [--label before]
    (needs py-spy in the venv: .venv/bin/pip install py-spy; as root, or with ptrace allowed)

Starts a private stack (ragkb_cli.stack) with the retriever's query-vector cache off (each --top-k asks the same
questions: a cached vector would hide the embedding), writes a KB of --points chunks with bench/scale.py (real SciFact
text and e5 vectors, scaled up), waits until its index has optimised, then for each --top-k sends --queries hybrid
searches (or --mode ones) one after the other through the public `POST /v1/search` while py-spy samples both
services (`py-spy record --format raw`, 250 samples/s, idle threads left out, so a sample is a thread on a CPU or
waiting to get one). Each sample is given to a stage by the innermost frame that one of STAGE_RULES names.

Three views of the same requests, all in bench/results/profile-search[-LABEL].{json,md} and flame graphs
profile-search[-LABEL]-{api,retriever}-top{K}.svg:

- wall time: the client's HTTP latency; the api's own stages from its `Server-Timing` header (auth, kbs,
  retriever, total); the retriever's `took_ms` and `timings_ms` stages; "outside the handlers" is HTTP minus
  the api's total (the client, both HTTP servers' parsing and the loop);
- CPU: each service's CPU time per request from /proc (every thread, native ones included: ONNX Runtime's
  pool, Qdrant Edge);
- samples: per stage, the share of each service's Python samples and the ms per request they stand for.

Wall figures move with the load on the machine; the sample shares and CPU ms per request much less: compare
two runs (a `--label before` and an `--label after`) by those when the machine is shared.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import scale
from common import DATA, QUERY_CACHE_ENV, REPO, RESULTS, percentile, read_jsonl, save_result

from ragkb_cli.stack import PrivateStack, private_stack

WARM_UP = 30
PY_SPY = REPO / ".venv" / "bin" / "py-spy"
SAMPLE_RATE = 250
# (stage, pattern on a py-spy frame "Class.function (package/file.py:line)"): a sample belongs to the stage of
# its innermost frame that matches; the first rule wins on one frame. Stages are named for what they do.
F = r"(^|\.)"  # a function name starts the frame or follows its class
STAGE_RULES: dict[str, tuple[tuple[str, str], ...]] = {
    "api": (
        ("auth: key lookup + rate limit", F + r"(_authenticated_within_limit|authenticate|take) \("),
        ("auth: guard", r"AccessGuard\.__call__"),
        ("KB lookups (database)", F + r"(require_readable_kbs|_kb_searches|_searchable_kbs) \("),
        ("query building", F + r"(_query|search_scope|with_overrides|_with_top_k|merged_quotas) \("),
        ("retriever hop: decode answer", F + r"(json|model_validate|model_validate_json) \("),
        ("retriever hop: encode query", F + r"(model_dump|model_dump_json|dumps) \("),
        ("retriever hop: HTTP client", r"\((httpx|httpcore|urllib3|http/client|ragkb_api/retriever_async)[/.]"),
        ("response model", r"SearchService\.search \(ragkb_api"),
        ("request decode + validation", r"(_extract_data|parse_values_from_connection_kwargs|validate_python)"),
        ("response encode", r"(to_response|encode_json|default_serializer|_create_response|model_dump)"),
        ("HTTP server (uvicorn, h11)", r"\((uvicorn|h11|httptools)[/.]"),
        ("logging", r"\(logging[/.]"),
        ("Litestar routing, middleware", r"\(litestar[/.]"),
        ("event loop, thread hand-offs", r"\((asyncio|anyio|threading|concurrent)[/.]"),
    ),
    "retriever": (
        ("embed (ONNX Runtime)", r"(Session\.run|OnnxEncoder\.encode) \("),
        ("embed (tokenise, cache)", F + r"(embed_query|query_vector) \("),
        ("analyze (BM25 terms)", r"\(ragkb_analyzer/"),
        ("engine: legs + fusion (Edge)", r"EdgeIndex\.search \(ragkb_retriever/index/edge\.py"),
        ("engine: payload reads", r"EdgeIndex\.search\.<locals>|(^|\.)_hit \(ragkb_retriever/index/edge"),
        ("engine request building", r"\(ragkb_retriever/index/(edge|port|filters)\.py"),
        ("hits from engine points", F + r"(_annotated_hits|_hit|_ranks|_leg_rankings) \("),
        ("assembly (cuts)", r"\(ragkb_retriever/assembly\.py"),
        ("result model", r"SearchService\.search \(ragkb_retriever"),
        ("request decode + validation", r"(_extract_data|parse_values_from_connection_kwargs|validate_python)"),
        ("response encode", r"(to_response|encode_json|default_serializer|_create_response|model_dump)"),
        ("HTTP server (uvicorn, h11)", r"\((uvicorn|h11|httptools)[/.]"),
        ("logging", r"\(logging[/.]"),
        ("Litestar routing, middleware", r"\(litestar[/.]"),
        ("event loop, thread hand-offs", r"\((asyncio|anyio|threading|concurrent)[/.]"),
    ),
}
# An innermost frame that only waits (the loop's select, an idle pool thread, the index's upkeep thread): py-spy
# does not always see such a thread as idle; its samples are left out.
IDLE_LEAF = re.compile(r"(Selector\.select|^_worker \(concurrent|ShardMaintainer\._run|Condition\.wait|Event\.wait) ")
OTHER = "other"


@dataclass
class Wall:
    http_ms: list[float] = field(default_factory=list)
    took_ms: list[float] = field(default_factory=list)
    api: dict[str, list[float]] = field(default_factory=dict)
    stages: dict[str, list[float]] = field(default_factory=dict)


def server_timing(header: str | None) -> dict[str, float]:
    """`Server-Timing: auth;dur=0.3, kbs;dur=0.6` as {name: ms}."""
    timings = {}
    for metric in (header or "").split(","):
        name, _, params = metric.strip().partition(";")
        if match := re.search(r"dur=([0-9.]+)", params):
            timings[name] = float(match.group(1))
    return timings


def search_body(kb_id: str, query: str, top_k: int, mode: str = "hybrid") -> dict[str, Any]:
    return {
        "query": query,
        "knowledge_base_ids": [kb_id],
        "mode": mode,
        "settings": {"top_k": top_k, "max_blocks": top_k, "rerank": False},
    }


def run_searches(http: httpx.Client, kb_id: str, queries: list[str], top_k: int, mode: str) -> Wall:
    wall = Wall()
    for query in queries:
        started = time.perf_counter()
        response = http.post("/v1/search", json=search_body(kb_id, query, top_k, mode))
        elapsed = (time.perf_counter() - started) * 1000
        response.raise_for_status()
        body = response.json()
        wall.http_ms.append(elapsed)
        wall.took_ms.append(body["took_ms"])
        for name, ms in server_timing(response.headers.get("server-timing")).items():
            wall.api.setdefault(name, []).append(ms)
        for name, ms in body["timings_ms"].items():
            wall.stages.setdefault(name, []).append(ms)
    return wall


def service_pids(stack: PrivateStack) -> dict[str, int]:
    """The api's and the retriever's process ids: the launcher's children, told apart by their module."""
    assert stack.process is not None
    children = Path(f"/proc/{stack.process.pid}/task/{stack.process.pid}/children").read_text().split()
    pids = {}
    for pid in children:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        for service, module in (("api", b"ragkb_api"), ("retriever", b"ragkb_retriever")):
            if module in command:
                pids[service] = int(pid)
    return pids


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of every thread of the process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime, stime in clock ticks (USER_HZ = 100)


@contextmanager
def sampled(pids: dict[str, int], prefix: Path) -> Iterator[dict[str, Path]]:
    """py-spy records each process until the block ends; yields the raw output file per service."""
    if not PY_SPY.exists():
        raise SystemExit(f"{PY_SPY} is missing: .venv/bin/pip install py-spy")
    outputs = {service: prefix.with_name(f"{prefix.name}-{service}.txt") for service in pids}
    recorders = [
        subprocess.Popen(
            [
                str(PY_SPY),
                "record",
                "-p",
                str(pid),
                "-r",
                str(SAMPLE_RATE),
                "--format",
                "raw",
                "-o",
                str(outputs[service]),
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for service, pid in pids.items()
    ]
    time.sleep(1.0)  # py-spy attaches
    try:
        yield outputs
    finally:
        for recorder in recorders:
            recorder.send_signal(signal.SIGINT)
        for recorder in recorders:
            recorder.wait(timeout=60)


def stage_of(frames: list[str], rules: tuple[tuple[str, str], ...]) -> str:
    for frame in reversed(frames):  # innermost first
        for stage, pattern in rules:
            if re.search(pattern, frame):
                return stage
    return OTHER


def stage_samples(raw: Path, rules: tuple[tuple[str, str], ...]) -> Counter[str]:
    """Samples per stage from py-spy's raw (collapsed) stacks: `thread;frame;...;frame count` per line."""
    counts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")[1:]
        if frames and not IDLE_LEAF.search(frames[-1]):
            counts[stage_of(frames, rules)] += int(count)
    return counts


def flame_graph(raw: Path, svg: Path, title: str) -> None:
    """An icicle graph of py-spy's raw stacks as SVG (outermost frame on top; width = share of samples)."""
    root: dict[str, Any] = {"n": 0, "kids": {}}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        node = root
        node["n"] += int(count)
        for frame in stack.split(";")[1:]:
            node = node["kids"].setdefault(frame, {"n": 0, "kids": {}})
            node["n"] += int(count)
    width, row = 1600.0, 16
    boxes: list[str] = []

    def draw(node: dict[str, Any], x: float, depth: int) -> int:
        deepest = depth
        for frame, kid in sorted(node["kids"].items(), key=lambda item: -item[1]["n"]):
            w = width * kid["n"] / max(root["n"], 1)
            if w >= 0.5:
                label = html.escape(frame)
                short = html.escape(frame[: int(w / 6.5)])  # cut before escaping: never inside an entity
                share = kid["n"] / max(root["n"], 1)
                hue = 20 + (hash(frame.split(" ")[0]) % 40)
                boxes.append(
                    f'<g><title>{label} ({share:.1%})</title><rect x="{x:.1f}" y="{depth * row + 24}" width="{w:.1f}" '
                    f'height="{row - 1}" fill="hsl({hue},85%,60%)"/>'
                    + (f'<text x="{x + 2:.1f}" y="{depth * row + 36}">{short}</text>' if w > 30 else "")
                    + "</g>"
                )
                deepest = max(deepest, draw(kid, x, depth + 1))
            x += w
        return deepest

    depth = draw(root, 0.0, 0)
    svg.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{(depth + 2) * row + 24}" '
        'font-family="monospace" font-size="11"><text x="4" y="14">'
        f"{html.escape(title)} ({root['n']} samples; hover a box for its share)</text>{''.join(boxes)}</svg>",
        encoding="utf-8",
    )


def stage_table(counts: Counter[str], requests: int) -> dict[str, dict[str, float]]:
    total = sum(counts.values()) or 1
    return {
        stage: {"share": round(count / total, 3), "ms_per_request": round(count / SAMPLE_RATE * 1000 / requests, 2)}
        for stage, count in counts.most_common()
    }


def p50(values: list[float]) -> float:
    return round(percentile(values, 50), 2) if values else 0.0


def profile(
    stack: PrivateStack, kb_id: str, queries: list[str], top_k: int, args: argparse.Namespace
) -> dict[str, Any]:
    pids = service_pids(stack)
    with httpx.Client(
        base_url=stack.api_url, timeout=120, headers={"Authorization": f"Bearer {stack.admin_key}"}
    ) as http:
        run_searches(http, kb_id, queries[:WARM_UP], top_k, args.mode)
        prefix = RESULTS / f"profile-search{'-' + args.label if args.label else ''}-top{top_k}"
        RESULTS.mkdir(parents=True, exist_ok=True)
        cpu_before = {service: cpu_seconds(pid) for service, pid in pids.items()}
        with sampled(pids, prefix) as raw_files:
            started = time.perf_counter()
            wall = run_searches(http, kb_id, queries[WARM_UP : WARM_UP + args.queries], top_k, args.mode)
            seconds = time.perf_counter() - started
        cpu_ms = {
            service: round((cpu_seconds(pid) - cpu_before[service]) * 1000 / len(wall.http_ms), 2)
            for service, pid in pids.items()
        }
    requests = len(wall.http_ms)
    services = {}
    for service, raw in raw_files.items():
        counts = stage_samples(raw, STAGE_RULES[service])
        total = sum(counts.values()) or 1
        services[service] = {
            "cpu_ms_per_request": cpu_ms[service],
            "samples": total,
            "stages": stage_table(counts, requests),
            "raw_stacks": str(raw.relative_to(REPO)),
        }
        flame_graph(raw, raw.with_suffix(".svg"), f"{service}, {args.mode} top_k {top_k}, {requests} searches")
    api_total = wall.api.get("total", [])
    return {
        "top_k": top_k,
        "requests": requests,
        "seconds": round(seconds, 1),
        "wall_p50_ms": {
            "http": p50(wall.http_ms),
            "api_total": p50(api_total),
            "outside_handlers": p50([h - a for h, a in zip(wall.http_ms, api_total, strict=True)])
            if api_total
            else None,
            # Per request, then the median: what the api layer (both HTTP servers, the hop, the api's handler)
            # adds to the retriever's own time, and the api handler's time outside its call to the retriever.
            "api_layer": p50([h - t for h, t in zip(wall.http_ms, wall.took_ms, strict=True)]),
            "api_handler_outside_hop": p50(
                [a - r for a, r in zip(api_total, wall.api.get("retriever", []), strict=True)]
            )
            if api_total
            else None,
            **{f"api_{name}": p50(values) for name, values in wall.api.items() if name != "total"},
            "retriever_took": p50(wall.took_ms),
            **{f"retriever_{name}": p50(values) for name, values in wall.stages.items()},
        },
        "services": services,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Profile of {result.get('mode', 'hybrid')} searches over HTTP, one client, {result['points']:,} chunks "
        f"({result['label'] or 'no label'}); load average at the start {result['load_average']}.",
    ]
    for run in result["runs"]:
        lines += ["", f"### top_k {run['top_k']}: {run['requests']} requests", "", "| wall p50 | ms |", "|---|---|"]
        lines += [f"| {name} | {ms} |" for name, ms in run["wall_p50_ms"].items()]
        for service, figures in run["services"].items():
            lines += [
                "",
                f"{service}: {figures['cpu_ms_per_request']} ms CPU per request (all threads), "
                f"{figures['samples']} Python samples",
                "",
                "| stage | share of samples | sampled ms per request |",
                "|---|---|---|",
            ]
            lines += [
                f"| {stage} | {figures_['share']:.1%} | {figures_['ms_per_request']} |"
                for stage, figures_ in figures["stages"].items()
            ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--base", type=int, default=1000, help="real passages the corpus is scaled up from")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--top-k", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--mode", choices=["hybrid", "keyword", "semantic"], default="hybrid")
    parser.add_argument("--label", default="")
    parser.add_argument(
        "--restage", action="store_true", help="only give the samples of the run --label to stages again (new rules)"
    )
    args = parser.parse_args()
    if args.restage:
        restage(args.label)
        return
    queries = [query["text"] for query in read_jsonl(DATA / "scifact" / "queries.jsonl")]
    base = scale.load_base(args.base)
    load = Path("/proc/loadavg").read_text().split()[0]
    # Cache off: each --top-k asks the same questions, and the warm-up the first of them.
    cache = {QUERY_CACHE_ENV: "0"}
    with (
        tempfile.TemporaryDirectory(prefix="ragkb-profile-") as workdir,
        private_stack(REPO, Path(workdir), **cache) as stack,
    ):
        with httpx.Client(
            base_url=stack.api_url, timeout=120, headers={"Authorization": f"Bearer {stack.admin_key}"}
        ) as http:
            kb_id = scale.create_kb(http, f"bench-profile-{args.points}")
            retriever = scale.retriever_client(stack.address.retriever_url, stack.address.service_token)
            scale.write_points(retriever, kb_id, args.points, base)
            retriever.close()
            body = search_body(kb_id, queries[0], 10)
            scale.wait_until_optimized(lambda: _probe(http, body), 10.0)
        runs = [profile(stack, kb_id, queries, top_k, args) for top_k in args.top_k]
    result = {"points": args.points, "mode": args.mode, "label": args.label, "load_average": load, "runs": runs}
    save_result(f"profile-search-{args.label}" if args.label else "profile-search", result, markdown(result))


def restage(label: str) -> None:
    """Recount the stages of a saved run from its raw stacks (after STAGE_RULES changed), same figures else."""
    name = f"profile-search-{label}" if label else "profile-search"
    result = json.loads((RESULTS / f"{name}.json").read_text())
    for run in result["runs"]:
        for service, figures in run["services"].items():
            raw = REPO / figures["raw_stacks"]
            counts = stage_samples(raw, STAGE_RULES[service])
            figures["samples"] = sum(counts.values())
            figures["stages"] = stage_table(counts, run["requests"])
            title = f"{service}, {result.get('mode', 'hybrid')} top_k {run['top_k']}, {run['requests']} searches"
            flame_graph(raw, raw.with_suffix(".svg"), title)
    result = {key: value for key, value in result.items() if key not in ("machine", "at")} | {"restaged": True}
    save_result(name, result, markdown(result))


def _probe(http: httpx.Client, body: dict[str, Any]) -> float | None:
    started = time.perf_counter()
    response = http.post("/v1/search", json=body)
    return (time.perf_counter() - started) * 1000 if response.status_code == 200 else None


if __name__ == "__main__":
    main()
