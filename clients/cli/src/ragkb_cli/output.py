"""What the CLI prints, as lines: the sync plan and summary, the KB table, search results."""

from __future__ import annotations

from typing import Any

from ragkb_cli.api import Json
from ragkb_cli.sync import SyncReport

SNIPPET_CHARS = 100
KB_COUNT_COLUMNS = ("done", "pending", "processing", "failed")


def summary_line(report: SyncReport) -> str:
    return f"uploaded {report.uploaded}, unchanged {report.unchanged}, deleted {report.deleted}, failed {report.failed}"


def failure_lines(failures: dict[str, str]) -> list[str]:
    return [f"failed {source_id}: {message}" for source_id, message in sorted(failures.items())]


def plan_lines(plan: Json) -> list[str]:
    """The dry-run plan: the counts, then one line per file that would change."""
    counts = plan.get("counts") or {}
    head = ", ".join(f"{key} {counts.get(key, 0)}" for key in ("upload", "unchanged", "delete", "excluded"))
    lines = [f"plan: {head}"]
    lines += [f"upload {entry['source_id']} ({entry.get('reason', 'new')})" for entry in plan.get("upload", [])]
    lines += [f"delete {entry['source_id']}" for entry in plan.get("delete", [])]
    lines += [f"exclude {entry['source_id']} ({entry.get('reason', '')})" for entry in plan.get("excluded", [])]
    return lines


def excluded_lines(plan: Json) -> list[str]:
    return [f"excluded {entry['source_id']}: {entry.get('reason', '')}" for entry in plan.get("excluded", [])]


def kb_table(kbs: list[Json]) -> list[str]:
    """id, name (marked while the KB is being deleted), total documents and the count per status, as aligned
    columns."""
    header = ["ID", "NAME", "DOCS", *(column.upper() for column in KB_COUNT_COLUMNS)]
    rows = [header]
    for kb in kbs:
        counts: dict[str, Any] = kb.get("document_counts") or {}
        total = sum(int(value) for value in counts.values())
        # A KB whose deletion job runs (or failed: DELETE it again) takes no writes or searches.
        name = f"{kb['name']} (deleting)" if kb.get("status") == "deleting" else str(kb["name"])
        rows.append([str(kb["id"]), name, str(total), *(str(counts.get(c, 0)) for c in KB_COUNT_COLUMNS)])
    widths = [max(len(row[index]) for row in rows) for index in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def deletion_line(kb: Json, job: Json) -> str:
    """Where a KB's deletion job stands: done, still going (with how to follow it), or failed (and why)."""
    name = f"{kb['name']} ({kb['id']})"
    progress: Json = job.get("progress") or {}
    if job["status"] == "succeeded":
        return f"deleted {name}: {progress.get('total', 0)} documents"
    if job["status"] == "failed":
        reasons = "; ".join(str(error.get("message", "")) for error in job.get("errors", []))
        return f"deleting {name} failed: {reasons or 'no reason given'} (run the same command again to resume)"
    done = f"{progress.get('current', 0)}/{progress.get('total', 0)} documents"
    return f"deleting {name}: job {job['id']} {job['status']}, {done} (follow it: GET /v1/jobs/{job['id']})"


def search_lines(answer: Json) -> list[str]:
    """Per result: rank, score, title (source id), page; then a one-line snippet of the passage."""
    results: list[Json] = answer.get("results", [])
    if not results:
        return ["no results"]
    lines = []
    for rank, result in enumerate(results, start=1):
        lines.append(f"{rank:>2}. {float(result.get('score', 0.0)):.4f}  {_citation(result)}")
        lines.append(f"    {snippet(str(result.get('text', '')))}")
    return lines


def _citation(result: Json) -> str:
    title = str(result.get("title") or result.get("source_id") or "")
    source_id = result.get("source_id")
    citation = f"{title} ({source_id})" if source_id and source_id != title else title
    headings = [str(heading) for heading in result.get("heading_path") or []]
    if headings:
        citation += " > " + " > ".join(headings)
    if result.get("page") is not None:
        citation += f"  p. {result['page']}"
    return citation


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def consistency_lines(kb: Json, report: Json) -> list[str]:
    """One line saying whether the KB is consistent, then one per finding."""
    state = "consistent" if report["consistent"] else f"{len(report['findings'])} findings"
    head = f"{kb['name']} ({kb['id']}): {state}: {report['documents']} documents, {report['points']} points"
    return [
        head,
        *(f"{finding['kind']} {finding['document_id']}: {finding['detail']}" for finding in report["findings"]),
    ]


def repair_lines(kb: Json, repair: Json) -> list[str]:
    """What the check found, what the repair did, and the check after it."""
    actions = (
        f"repaired: re-queued {len(repair['requeued'])} documents, deleted {len(repair['deleted_versions'])} orphan "
        f"versions and {len(repair['deleted_documents'])} orphan documents"
    )
    return [*consistency_lines(kb, repair["before"]), actions, *consistency_lines(kb, repair["after"])]
