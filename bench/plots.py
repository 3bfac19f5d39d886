"""PNG plots of whatever benchmark results exist in bench/results/, one per kind; kinds with no file are skipped.

    python bench/plots.py [--results bench/results]

- quality.png (quality*.json, bench/quality.py): nDCG@10 and MRR@10, grouped bars, a group per corpus (and
  `--label` of the file, when not the default one), a bar per run (keyword, semantic, hybrid, hybrid+rerank,
  the char-bigram baseline); a hatched bar answered degraded at least once.
- latency.png (query*.json, bench/query.py): one client's HTTP latency (bar p50, whisker to p95) and the
  concurrent clients' queries/s, a group per index size, a bar per mode.
- ingest.png (ingest*.json, bench/ingest.py and bench/formats.py): pipeline chunks/s next to the model's raw
  encode rate per KB, chunks/s per file format, the worker's time per stage (stacked shares), and each
  service's peak memory while it ingested (PSS of its processes summed, where bench/ingest.py measured it).
- peers.png (peers*.json, bench/peers.py): nDCG@10, MRR@10, query latency p50 and ingest docs/s, a group per
  corpus, a bar per system (ragkb's ingest is its end-to-end figure of the same run, a bar per passage precision
  measured, a peer's is its own embedding path; ragkb's latency is an HTTP request, a peer's an in-process call
  plus the query embedding).
- rerank-latency.png (rerank-latency.json, bench/rerank_latency.py): p50 and p95 per collection.

matplotlib is a benchmark-only dependency (bench/requirements-plots.txt); the Agg backend, no display needed.
Exit status 1 when a file could not be read or plotted (the others are still drawn).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
from common import RESULTS, ragkb_ingest_runs
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

matplotlib.use("Agg")  # figures are drawn with Figure directly (no pyplot), but nothing may look for a display

Result = tuple[str, dict[str, Any]]  # (file stem, contents)
Value = float | None
STAGE_COLOURS = {"parse": "#4c72b0", "chunk": "#dd8452", "embed": "#55a868", "index": "#c44e52"}


@dataclass(frozen=True)
class Kind:
    name: str
    pattern: str
    draw: Callable[[list[Result]], Figure]
    # Top-level keys of this kind's results, any of them: other benches' files share a prefix (quality-compare-*,
    # query-encoder*, ingest-profile-*) and are left out, not charged to the kind as a problem.
    marks: tuple[str, ...]

    @property
    def png(self) -> str:
        return f"{self.name}.png"


# --- drawing helpers ------------------------------------------------------------------------------------------


# Groups on one axis above which their names are slanted.
CROWDED_GROUPS = 8


def grouped_bars(
    axis: Axes,
    groups: Sequence[str],
    series: dict[str, list[Value]],
    *,
    upper: dict[str, list[Value]] | None = None,
    hatched: dict[str, list[bool]] | None = None,
    value_format: str = "{:.3g}",
) -> None:
    """A bar per series in every group, side by side; a missing value (None) draws no bar. `upper`: a whisker
    from the bar's top up to that value (p95 over a p50 bar); `hatched`: bars to mark."""
    width = 0.8 / max(1, len(series))
    for index, (name, values) in enumerate(series.items()):
        offset = (index - (len(series) - 1) / 2) * width
        shown = [(x, value) for x, value in enumerate(values) if value is not None]
        if not shown:
            continue
        xs = [x + offset for x, _ in shown]
        heights = [value for _, value in shown]
        whiskers = None
        if upper is not None:
            tops = [upper[name][x] for x, _ in shown]
            whiskers = [
                [0.0] * len(shown),
                [max(0.0, (t if t is not None else h) - h) for t, h in zip(tops, heights, strict=True)],
            ]
        # A colour per series, the same in every panel even where a series has no bar.
        colour = f"C{index % 10}"
        bars = axis.bar(xs, heights, width, label=name, color=colour, yerr=whiskers, capsize=3 if whiskers else 0)
        if hatched is not None:
            for patch, (x, _) in zip(bars.patches, shown, strict=True):
                if hatched[name][x]:
                    patch.set_hatch("//")
        axis.bar_label(bars, labels=[value_format.format(h) for h in heights], fontsize=7, padding=2)
    # Many groups (a results folder that gathered many runs) would print their names over each other: slanted.
    crowded = len(groups) > CROWDED_GROUPS
    slant: dict[str, Any] = {"rotation": 35, "ha": "right"} if crowded else {}
    axis.set_xticks(range(len(groups)), list(groups), **slant)
    axis.margins(y=0.15)


def legend(figure: Figure, names: Sequence[str]) -> None:
    """One legend for every panel, above them: the series' colours are the same in each (grouped_bars)."""
    handles = [Patch(facecolor=f"C{index % 10}", label=name) for index, name in enumerate(names)]
    figure.legend(handles=handles, loc="outside upper center", ncols=min(len(names), 5), fontsize="small")


def new_figure(rows: int, columns: int, groups: int, bars_per_group: int) -> tuple[Figure, list[Axes]]:
    width = min(24.0, max(4.0 + 4.0 * columns, 0.35 * groups * max(1, bars_per_group) * columns + 2))
    figure = Figure(figsize=(width, 3.8 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False)
    return figure, [axis for row in axes for axis in row]


def label_of(stem: str, prefix: str) -> str:
    """The file's own label: quality-lowk1 → lowk1; the default file (quality) has none."""
    return stem[len(prefix) :].lstrip("-_") if stem.startswith(prefix) else stem


def in_order(names: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(names))


def number(value: Any) -> Value:
    return float(value) if isinstance(value, int | float) else None


# --- the kinds ------------------------------------------------------------------------------------------------


def draw_quality(results: list[Result]) -> Figure:
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for stem, result in results:
        label = label_of(stem, "quality")
        for row in result["rows"]:
            group = f"{row['corpus']} ({row['split']})" + (f"\n[{label}]" if label else "")
            cells[(group, row["run"])] = row
    groups = in_order([group for group, _ in cells])
    runs = in_order([run for _, run in cells])
    figure, axes = new_figure(2, 1, len(groups), len(runs))
    degraded = {run: [bool(cells.get((g, run), {}).get("degraded")) for g in groups] for run in runs}
    for axis, metric, title in zip(axes, ("ndcg@10", "mrr@10"), ("nDCG@10", "MRR@10"), strict=True):
        series = {run: [number(cells.get((g, run), {}).get(metric)) for g in groups] for run in runs}
        grouped_bars(axis, groups, series, hatched=degraded)
        axis.set(ylabel=title, ylim=(0, 1.1), title=f"{title} per corpus and run (hatched: some answers degraded)")
    legend(figure, runs)
    return figure


def draw_latency(results: list[Result]) -> Figure:
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    clients: set[int] = set()
    sizes: dict[str, int] = {}
    for stem, result in results:
        label = label_of(stem, "query") if len(results) > 1 else ""
        for run in result["scales"]:
            group = f"{run['points']:,} chunks" + (f"\n[{label}]" if label else "")
            sizes[group] = run["points"]
            for row in run["modes"]:
                cells[(group, row["mode"])] = row
                clients.add(row["concurrent"]["clients"])
    # Smallest index first, whichever file a scale came from (a --large run is a file of its own).
    groups = sorted(in_order([group for group, _ in cells]), key=lambda group: sizes[group])
    modes = in_order([mode for _, mode in cells])
    figure, axes = new_figure(2, 1, len(groups), len(modes))

    def single(group: str, mode: str, p: str) -> Value:
        return number(cells[(group, mode)]["single"]["http_ms"].get(p)) if (group, mode) in cells else None

    p50 = {mode: [single(g, mode, "p50") for g in groups] for mode in modes}
    p95 = {mode: [single(g, mode, "p95") for g in groups] for mode in modes}
    grouped_bars(axes[0], groups, p50, upper=p95, value_format="{:.0f}")
    axes[0].set(ylabel="ms", title="POST /v1/search, one client: HTTP latency (bar p50, whisker p95)")
    rates = {
        mode: [number(cells[(g, mode)]["concurrent"]["queries_per_s"]) if (g, mode) in cells else None for g in groups]
        for mode in modes
    }
    grouped_bars(axes[1], groups, rates, value_format="{:.0f}")
    many = "/".join(str(c) for c in sorted(clients))
    axes[1].set(ylabel="queries/s", title=f"{many} concurrent clients: throughput")
    legend(figure, modes)
    return figure


def draw_ingest(results: list[Result]) -> Figure:
    kbs = [result for _, result in results if "formats" not in result]
    formats = [row for _, result in results if "formats" in result for row in result["formats"]]
    measured = [kb for kb in kbs if "pss_mb_peak_by_role" in (kb.get("process_memory") or {})]
    panels = (1 if kbs else 0) + (1 if formats else 0) + 1 + (1 if measured else 0)
    figure, axes = new_figure(panels, 1, max(len(kbs), len(formats)), 2)
    panel = iter(axes)
    if kbs:
        axis = next(panel)
        groups = [
            f"{kb['knowledge_base']}" + (f"\nefficiency {kb['efficiency']}" if kb.get("efficiency") is not None else "")
            for kb in kbs
        ]
        series = {
            "pipeline, end to end": [number(kb["chunks_per_s"]) for kb in kbs],
            "model encode alone": [number((kb.get("raw_encode") or {}).get("chunks_per_s")) for kb in kbs],
        }
        grouped_bars(axis, groups, series)
        axis.set(ylabel="chunks/s", title="Ingestion through the API vs. the embedding model alone")
        axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    if formats:
        axis = next(panel)
        groups = [f".{row['format']}" + (f"\n{row['failed']} failed" if row.get("failed") else "") for row in formats]
        grouped_bars(axis, groups, {"chunks/s": [number(row["chunks_per_s"]) for row in formats]})
        axis.set(ylabel="chunks/s", title="Ingestion per file format (bench/formats.py)")
    axis = next(panel)
    shares = [(kb["knowledge_base"], kb.get("stage_share") or {}) for kb in kbs]
    shares += [(f".{row['format']}", row.get("stage_share") or {}) for row in formats]
    stages = in_order([stage for _, share in shares for stage in share])
    left = [0.0] * len(shares)
    for stage in stages:
        widths = [float(share.get(stage, 0.0)) for _, share in shares]
        axis.barh(range(len(shares)), widths, left=left, label=stage, color=STAGE_COLOURS.get(stage))
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axis.set_yticks(range(len(shares)), [name for name, _ in shares])
    axis.invert_yaxis()
    axis.set(xlim=(0, 1), xlabel="share of worker time", title="Worker time per stage")
    axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    if measured:
        axis = next(panel)
        by_role = [kb["process_memory"]["pss_mb_peak_by_role"] for kb in measured]
        roles = in_order([role for totals in by_role for role in totals])
        series = {role.removeprefix("ragkb_"): [number(totals.get(role)) for totals in by_role] for role in roles}
        grouped_bars(axis, [kb["knowledge_base"] for kb in measured], series, value_format="{:.0f}")
        axis.set(ylabel="MB", title="Peak memory while ingesting, per service (PSS, its processes summed)")
        axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    return figure


def draw_peers(results: list[Result]) -> Figure:
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for stem, result in results:
        label = label_of(stem, "peers") if len(results) > 1 else ""
        for corpus in result["corpora"]:
            group = f"{corpus['corpus']} ({corpus['split']})\n{corpus['documents']:,} docs" + (
                f"\n[{label}]" if label else ""
            )
            for system in corpus["systems"]:
                cells[(group, system["system"])] = system
                # ragkb's ingestion in its other passage precisions: bars of their own, in the ingest panel only.
                for run in ragkb_ingest_runs(system)[1:] if system["system"] == "ragkb" else []:
                    cells[(group, f"ragkb, {run['passage_precision']} passages")] = {"system": "ragkb", "ingest": [run]}
    groups = in_order([group for group, _ in cells])
    systems = in_order([system for _, system in cells])
    figure, axes = new_figure(2, 2, len(groups), len(systems))

    def figure_of(system: dict[str, Any]) -> dict[str, Value]:
        runs = ragkb_ingest_runs(system)[:1] if system["system"] == "ragkb" else [system.get("ingest_with_embedding")]
        ingest = runs[0] if runs else None
        return {
            "ndcg@10": number(system.get("ndcg@10")),
            "mrr@10": number(system.get("mrr@10")),
            "latency": number((system.get("latency_ms") or {}).get("p50")),
            "ingest": number((ingest or {}).get("documents_per_s")),
        }

    values = {key: figure_of(system) for key, system in cells.items()}
    panels = (
        ("ndcg@10", "nDCG@10", "nDCG@10", "{:.3f}"),
        ("mrr@10", "MRR@10", "MRR@10", "{:.3f}"),
        ("latency", "ms", "query latency p50", "{:.1f}"),
        ("ingest", "documents/s", "ingestion with embedding", "{:.1f}"),
    )
    for axis, (key, unit, title, value_format) in zip(axes, panels, strict=True):
        series = {s: [values[(g, s)][key] if (g, s) in values else None for g in groups] for s in systems}
        grouped_bars(axis, groups, series, value_format=value_format)
        axis.set(ylabel=unit, title=title)
    legend(figure, systems)
    figure.supxlabel(
        "top 100 documents per query; latency: ragkb an HTTP request, a peer its in-process call plus the query "
        "embedding;\ningestion: ragkb end to end (float32 passages unless named), a peer its own embedding path",
        fontsize="small",
    )
    return figure


def draw_rerank(results: list[Result]) -> Figure:
    rows: list[tuple[str, dict[str, Any]]] = []
    titles = []
    for _, result in results:
        titles.append(f"{result['model']}: 1 query x {result['candidates']} candidates")
        rows += [(row["collection"], row) for row in result["results"]]
    figure, axes = new_figure(1, 1, len(rows), 2)
    groups = [collection for collection, _ in rows]
    series = {
        "p50": [number(row["p50_ms"]) for _, row in rows],
        "p95": [number(row["p95_ms"]) for _, row in rows],
    }
    grouped_bars(axes[0], groups, series, value_format="{:.0f}")
    axes[0].set(ylabel="ms", title="Reranking latency, " + "; ".join(in_order(titles)))
    legend(figure, list(series))
    return figure


KINDS = (
    Kind("quality", "quality*.json", draw_quality, ("rows",)),
    Kind("latency", "query*.json", draw_latency, ("scales",)),
    Kind("ingest", "ingest*.json", draw_ingest, ("knowledge_base", "formats")),
    Kind("peers", "peers*.json", draw_peers, ("corpora",)),
    Kind("rerank-latency", "rerank-latency*.json", draw_rerank, ("results",)),
)


# --- reading and writing --------------------------------------------------------------------------------------


def render(results: Path, report: Callable[[str], None] = print) -> tuple[dict[str, Figure], list[str]]:
    """A figure per kind that has result files in `results`, and the problems met (a file that is not JSON, a
    kind whose files lack what its plot needs). Nothing is written."""
    figures: dict[str, Figure] = {}
    problems: list[str] = []
    for kind in KINDS:
        paths = sorted(results.glob(kind.pattern))
        if not paths:
            report(f"{kind.png}: skipped, no {kind.pattern} in {results}")
            continue
        loaded: list[Result] = []
        kept: list[Path] = []
        for path in paths:
            try:
                result = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as error:
                problems.append(f"{path}: not readable as JSON ({error})")
                continue
            if isinstance(result, dict) and any(mark in result for mark in kind.marks):
                loaded.append((path.stem, result))
                kept.append(path)
        if not loaded:
            report(f"{kind.png}: skipped, no {kind.name} result among {kind.pattern} in {results}")
            continue
        try:
            figures[kind.name] = kind.draw(loaded)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            names = ", ".join(path.name for path in kept)
            problems.append(f"{kind.png}: not drawn, {names} lacks what it needs ({type(error).__name__}: {error})")
    return figures, problems


def write_plots(results: Path, report: Callable[[str], None] = print) -> tuple[list[Path], list[str]]:
    figures, problems = render(results, report)
    written = []
    for name, figure in figures.items():
        path = results / f"{name}.png"
        figure.savefig(path, dpi=120)
        written.append(path)
        report(f"{path.name}: written")
    return written, problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS, help="the folder of result files (and PNGs)")
    args = parser.parse_args()
    if not args.results.is_dir():
        print(f"no results folder {args.results}: nothing to plot")
        return
    _, problems = write_plots(args.results)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
