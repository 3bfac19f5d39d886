"""Query latency of two versions of ragkb side by side, in one run: this checkout against a baseline checkout.

    python bench/latency_ab.py --baseline /work/main [--candidate DIR] [--points 10000] [--queries 300] [--label L]
                               [--clients 8] [--baseline-env K=V ...] [--candidate-env K=V ...]

Starts two private stacks on this machine (ragkb_cli.stack: launcher, own Redis, own data folder): the
baseline's with its own virtual environment (BASELINE/.venv/bin/python runs BASELINE's code) and this
checkout's. Both get the same KB: --points chunks of SciFact scaled up by bench/scale.py (same seed, so
the same points), and the same client key (a read grant on that KB, as another team's application holds,
so that the key's lookup is measured; not the bootstrap admin key). Once both have optimised their index,
the searches alternate between the two stacks, query by query, in A B B A order, so that whatever else
the shared machine does lands on both alike. Each query is sent once per stack and mode; the hybrid queries are
then asked again (`hybrid-repeat`: every query vector a hit of the retriever's cache, so no embedding).
With `--clients N` (N > 1) each stack is sent blocks of N × 4 queries by N concurrent clients, the stacks
alternating block by block (A B B A), and the queries/s of each side's blocks is reported too. The `--*-env`
settings (RAGKB_… variables) start one side with another configuration: the same checkout on both sides with
one setting changed is an A/B of that setting.

Per stack and mode (hybrid, keyword and hybrid-repeat; keyword has no embedding, so it shows the api layer alone):
HTTP p50/p95/p99, the retriever's `took_ms`, the api layer (HTTP − took_ms, per request), the api's stages
from `Server-Timing` and the retriever's from `timings_ms`, and each service's CPU per request (/proc,
every thread). Then this ÷ baseline ratios, and whether the answers are identical: the same passages in the
same order with the same scores, for every query.

Results: bench/results/latency-ab[-LABEL].json and .md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import scale
from common import DATA, REPO, percentile, read_jsonl, save_result, settings_of
from profile_search import cpu_seconds, server_timing, service_pids

from ragkb_cli.stack import PrivateStack, private_stack

WARM_UP = 30
# Sent in this order: `hybrid-repeat` is hybrid again with the same queries (their vectors cached).
MODES = ("hybrid", "keyword", "hybrid-repeat")
REPEAT = "-repeat"
SCORE_TOLERANCE = 1e-6


@dataclass
class Side:
    """One stack under test and what its searches measured."""

    name: str
    stack: PrivateStack
    http: httpx.Client
    kb_id: str
    http_ms: dict[str, list[float]] = field(default_factory=dict)
    took_ms: dict[str, list[float]] = field(default_factory=dict)
    api: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    stages: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    answers: dict[str, list[list[tuple[str, float]]]] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    # Wall seconds and queries of the measured blocks per mode (concurrent clients: queries/s).
    busy_s: dict[str, float] = field(default_factory=dict)

    def search(self, query: str, mode: str, top_k: int, record: bool = True) -> None:
        body = {"query": query, "knowledge_base_ids": [self.kb_id], "mode": mode.removesuffix(REPEAT), "top_k": top_k}
        started = time.perf_counter()
        response = self.http.post("/v1/search", json=body)
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise SystemExit(f"{self.name}: search answered {response.status_code}: {response.text[:300]}")
        if not record:
            return
        answer = response.json()
        self.http_ms.setdefault(mode, []).append(elapsed)
        self.took_ms.setdefault(mode, []).append(answer["took_ms"])
        for name, ms in server_timing(response.headers.get("server-timing")).items():
            self.api.setdefault(mode, {}).setdefault(name, []).append(ms)
        for name, ms in answer["timings_ms"].items():
            self.stages.setdefault(mode, {}).setdefault(name, []).append(ms)
        # By source id and ordinal: chunk ids are derived from the KB's id, which differs between the stacks.
        passages = [(f"{hit['source_id']}#{hit['ordinal']}", hit["score"]) for hit in answer["results"]]
        self.answers.setdefault(mode, []).append(passages)


def q(values: list[float], at: float) -> float:
    return round(percentile(values, at), 2) if values else 0.0


def quantiles(values: list[float]) -> dict[str, float]:
    return {"p50": q(values, 50), "p95": q(values, 95), "p99": q(values, 99)}


@contextmanager
def side(
    name: str, repo: Path, *, python: str, workdir: Path, base: scale.BaseSet, points: int, env: dict[str, str]
) -> Iterator[tuple[PrivateStack, str, str]]:
    """A stack of `repo` with the scaled KB written and a client key that may read it: (stack, kb, key)."""
    print(f"{name}: starting {repo} with {python} {env or ''}", flush=True)
    with private_stack(repo, workdir, python=python, **{"RAGKB_QDRANT__OPTIMIZE_IDLE_S": "5", **env}) as stack:
        admin = {"Authorization": f"Bearer {stack.admin_key}"}
        with httpx.Client(base_url=stack.api_url, timeout=120, headers=admin) as http:
            kb_id = scale.create_kb(http, f"bench-ab-{points}")
            retriever = scale.retriever_client(stack.address.retriever_url, stack.address.service_token)
            print(f"{name}: writing {points} points", flush=True)
            scale.write_points(retriever, kb_id, points, base)
            retriever.close()
            created = http.post("/v1/api-keys", json={"name": "bench", "role": "client", "grants": {kb_id: "read"}})
            key = str(created.raise_for_status().json()["key"])
        yield stack, kb_id, key


def settle(sides: list[Side], query: str) -> None:
    """Wait out both indexes' optimisation (bench/scale.py wait_until_optimized)."""
    for one in sides:
        body = {"query": query, "knowledge_base_ids": [one.kb_id], "mode": "hybrid", "top_k": 10}

        def probe(http: httpx.Client = one.http, body: dict[str, Any] = body) -> float | None:
            started = time.perf_counter()
            ok = http.post("/v1/search", json=body).status_code == 200
            return (time.perf_counter() - started) * 1000 if ok else None

        print(f"{one.name}: {scale.wait_until_optimized(probe, 5.0)}", flush=True)


def alternate(sides: list[Side], queries: list[str], top_k: int, clients: int) -> None:
    """Every query on both stacks, A B then B A (a query, or with concurrent clients a block of them), per
    mode; CPU per service counted around the whole."""
    for mode in MODES:
        for query in queries[:WARM_UP]:
            for one in sides:
                one.search(query, mode, top_k, record=False)
    pids = {one.name: service_pids(one.stack) for one in sides}
    before = {one.name: {svc: cpu_seconds(pid) for svc, pid in pids[one.name].items()} for one in sides}
    measured = queries[WARM_UP:]
    block = 1 if clients == 1 else clients * 4
    with ThreadPoolExecutor(clients) as pool:
        for mode in MODES:
            for number, start in enumerate(range(0, len(measured), block)):
                for one in sides if number % 2 == 0 else reversed(sides):
                    send_block(pool, one, measured[start : start + block], mode, top_k)
    for one in sides:
        one.cpu_s = {svc: cpu_seconds(pid) - before[one.name][svc] for svc, pid in pids[one.name].items()}


def send_block(pool: ThreadPoolExecutor, one: Side, block: list[str], mode: str, top_k: int) -> None:
    """One block of queries to one stack, by the pool's clients at once (one query: on this thread)."""
    started = time.perf_counter()
    if len(block) == 1:
        one.search(block[0], mode, top_k)
    else:
        list(pool.map(lambda query: one.search(query, mode, top_k), block))
    one.busy_s[mode] = one.busy_s.get(mode, 0.0) + time.perf_counter() - started


def summary(one: Side, mode: str) -> dict[str, Any]:
    http, took = one.http_ms[mode], one.took_ms[mode]
    requests = sum(len(values) for values in one.http_ms.values())
    # The api's wait for the retriever beyond the retriever's own took_ms, per request: the hop (the api's client,
    # both directions on the wire, the retriever's HTTP server and handler around its search).
    waited = one.api.get(mode, {}).get("retriever", [])
    return {
        "http_ms": quantiles(http),
        "took_ms": quantiles(took),
        "api_layer_ms": quantiles([h - t for h, t in zip(http, took, strict=True)]),
        "retriever_hop_ms": quantiles([w - t for w, t in zip(waited, took, strict=True)])
        if len(waited) == len(took)
        else quantiles([0.0]),
        "queries_per_s": round(len(http) / one.busy_s[mode], 1),
        "api_stages_p50": {name: q(values, 50) for name, values in one.api.get(mode, {}).items()},
        "retriever_stages_p50": {name: q(values, 50) for name, values in one.stages.get(mode, {}).items()},
        # Both modes together: /proc counts a process, not a request's mode.
        "cpu_ms_per_request": {svc: round(s * 1000 / requests, 2) for svc, s in one.cpu_s.items()},
    }


def same_scores(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> bool:
    """The same number of passages with the same scores in the same order."""
    return len(a) == len(b) and all(abs(x - y) <= SCORE_TOLERANCE for (_, x), (_, y) in zip(a, b, strict=True))


def identical(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> bool:
    """The same passages with the same scores, up to the order of passages whose scores tie. The scaled corpus
    repeats each base passage (near-duplicates, often equal BM25 scores), and the engine orders a tie by point
    id, which derives from the KB's id: different in the two stacks."""
    if not same_scores(a, b):
        return False
    by_score_a: dict[float, set[str]] = {}
    by_score_b: dict[float, set[str]] = {}
    for (passage_a, score), (passage_b, _) in zip(a, b, strict=True):
        by_score_a.setdefault(score, set()).add(passage_a)
        by_score_b.setdefault(score, set()).add(passage_b)
    last = a[-1][1] if a else None
    # A tie at the cut may be filled from different duplicates: only the count must agree there.
    return all(by_score_a[s] == by_score_b.get(s) for s in by_score_a if s != last)


def compare(baseline: Side, candidate: Side) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in MODES:
        a, b = summary(baseline, mode), summary(candidate, mode)
        pairs = list(zip(baseline.answers[mode], candidate.answers[mode], strict=True))
        out[mode] = {
            baseline.name: a,
            candidate.name: b,
            "ratio_p50": {
                key: round(b[key]["p50"] / a[key]["p50"], 2) if a[key]["p50"] else None
                for key in ("http_ms", "took_ms", "api_layer_ms", "retriever_hop_ms")
            },
            "queries_per_s": {baseline.name: a["queries_per_s"], candidate.name: b["queries_per_s"]},
            "identical_answers": sum(identical(x, y) for x, y in pairs),
            "same_scores": sum(same_scores(x, y) for x, y in pairs),
            "same_passages_same_order": sum([i for i, _ in x] == [i for i, _ in y] for x, y in pairs),
            "queries": len(pairs),
        }
    return out


def markdown(result: dict[str, Any]) -> str:
    names = result["sides"]
    lines = [
        f"A/B of query latency, {result['points']:,} chunks, {result['queries']} queries per mode and stack, "
        f"alternating; baseline `{result['baseline']}` ({names[0]}) against this checkout ({names[1]}). "
        f"Load average at the start {result['load_average']}, at the end {result['load_average_end']}. "
        f"Concurrent clients: {result['clients']}; settings: {result['env']}.",
    ]
    for mode, figures in result["modes"].items():
        lines += [
            "",
            f"### {mode}, top_k {result['top_k']}",
            "",
            f"| ms | {names[0]} p50 / p95 / p99 | {names[1]} p50 / p95 / p99 | p50 ratio |",
            "|---|---|---|---|",
        ]
        for key in ("http_ms", "took_ms", "api_layer_ms", "retriever_hop_ms"):
            if key not in figures[names[0]] or key not in figures[names[1]]:
                continue
            a, b = figures[names[0]][key], figures[names[1]][key]
            lines.append(
                f"| {key} | {a['p50']} / {a['p95']} / {a['p99']} | {b['p50']} / {b['p95']} / {b['p99']} | "
                f"{figures['ratio_p50'][key]} |"
            )
        for group in ("api_stages_p50", "retriever_stages_p50"):
            a, b = figures[names[0]][group], figures[names[1]][group]
            for stage in sorted(set(a) | set(b)):
                lines.append(f"| {group[:-4]} {stage} p50 | {a.get(stage, '—')} | {b.get(stage, '—')} | |")
        rates = figures["queries_per_s"]
        lines.append(f"| queries/s | {rates[names[0]]} | {rates[names[1]]} | |")
        cpu_a, cpu_b = figures[names[0]]["cpu_ms_per_request"], figures[names[1]]["cpu_ms_per_request"]
        for svc in sorted(cpu_a):
            lines.append(f"| CPU ms/request, {svc} (both modes) | {cpu_a[svc]} | {cpu_b.get(svc)} | |")
        lines += [
            "",
            f"Same scores in the same order (within {SCORE_TOLERANCE}): {figures['same_scores']} of "
            f"{figures['queries']}; the same passages up to the order of tied scores: {figures['identical_answers']}; "
            f"the same passages in exactly the same order: {figures['same_passages_same_order']} (ties are ordered by "
            "point id, which differs between the two stacks' KBs).",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout with its own .venv")
    parser.add_argument(
        "--candidate",
        type=Path,
        default=REPO,
        help="the other side (default: this checkout); the baseline again is an A/A run",
    )
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--base", type=int, default=1000, help="real passages the corpus is scaled up from")
    parser.add_argument("--queries", type=int, default=300, help="measured queries per mode and stack")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--label", default="")
    parser.add_argument("--clients", type=int, default=1, help="concurrent clients per stack")
    parser.add_argument("--baseline-env", nargs="*", default=[], metavar="K=V", help="settings of the baseline")
    parser.add_argument("--candidate-env", nargs="*", default=[], metavar="K=V", help="settings of the other side")
    args = parser.parse_args()
    envs = {"baseline": settings_of(args.baseline_env), "this": settings_of(args.candidate_env)}
    queries = [query["text"] for query in read_jsonl(DATA / "scifact" / "queries.jsonl")][: WARM_UP + args.queries]
    base = scale.load_base(args.base)
    load = Path("/proc/loadavg").read_text().split()[0]
    baseline_python = str(args.baseline / ".venv" / "bin" / "python")
    with ExitStack() as stack:
        sides = []
        for name, repo, python in (
            ("baseline", args.baseline, baseline_python),
            ("this", args.candidate, str(args.candidate / ".venv/bin/python")),
        ):
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"ragkb-ab-{name}-")))
            running, kb_id, key = stack.enter_context(
                side(name, repo, python=python, workdir=workdir, base=base, points=args.points, env=envs[name])
            )
            http = stack.enter_context(
                httpx.Client(base_url=running.api_url, timeout=120, headers={"Authorization": f"Bearer {key}"})
            )
            sides.append(Side(name, running, http, kb_id))
        settle(sides, queries[0])
        alternate(sides, queries, args.top_k, args.clients)
        result = {
            "baseline": str(args.baseline),
            "candidate": str(args.candidate),
            "sides": [one.name for one in sides],
            "points": args.points,
            "queries": len(queries) - WARM_UP,
            "top_k": args.top_k,
            "clients": args.clients,
            "env": envs,
            "load_average": load,
            "load_average_end": Path("/proc/loadavg").read_text().split()[0],
            "modes": compare(sides[0], sides[1]),
        }
    save_result(f"latency-ab-{args.label}" if args.label else "latency-ab", result, markdown(result))


if __name__ == "__main__":
    main()
