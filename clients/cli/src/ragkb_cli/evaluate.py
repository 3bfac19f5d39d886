"""`ragkb eval`: import a BEIR folder (its queries and one split's qrels; optionally its corpus) into a KB,
and run an evaluation and print its metrics."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ragkb_cli.api import ApiClient, ApiError, Json

# Corpus documents per upload request (the server takes up to its max_batch_documents, 100 by default).
CORPUS_BATCH = 50
Item = TypeVar("Item")


@dataclass(frozen=True)
class BeirFolder:
    """A BEIR dataset folder: corpus.jsonl, queries.jsonl and qrels/<split>.tsv."""

    root: Path

    def qrels(self, split: str) -> Path:
        return self.root / "qrels" / f"{split}.tsv"

    @property
    def queries(self) -> Path:
        return self.root / "queries.jsonl"

    @property
    def corpus(self) -> Path:
        return self.root / "corpus.jsonl"

    def missing(self, split: str, with_corpus: bool) -> list[Path]:
        needed = [self.queries, self.qrels(split), *([self.corpus] if with_corpus else [])]
        return [path for path in needed if not path.is_file()]


@dataclass
class CorpusReport:
    uploaded: int = 0
    failures: dict[str, str] = field(default_factory=dict)


def corpus_documents(path: Path) -> Iterator[tuple[str, str, str]]:
    """(source_id, title, text) per corpus line: the BEIR corpus id becomes the document's source_id."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                doc_id = str(record["_id"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ApiError(0, "Malformed corpus", f"{path} line {number}: {exc}") from exc
            yield doc_id, str(record.get("title") or doc_id), str(record.get("text") or "")


def upload_corpus(
    api: ApiClient, kb_id: str, path: Path, concurrency: int, on_done: Callable[[], None] = lambda: None
) -> CorpusReport:
    """Upload every corpus document as a text document, CORPUS_BATCH a request (the batch endpoint: one request
    per document would wait on the per-key rate limit), `concurrency` requests at a time."""

    def upload(batch: list[tuple[str, str, str]]) -> list[tuple[str, str | None]]:
        items = [{"source_id": sid, "title": title, "text": text or title} for sid, title, text in batch]
        try:
            results = api.upload_texts(kb_id, items)["results"]
            outcomes = [(sid, _item_error(result)) for (sid, _, _), result in zip(batch, results, strict=True)]
        except ApiError as exc:
            outcomes = [(sid, f"{exc.title}: {exc.detail}") for sid, _, _ in batch]
        for _ in batch:
            on_done()
        return outcomes

    report = CorpusReport()
    with ThreadPoolExecutor(concurrency) as pool:
        for outcomes in pool.map(upload, batched(corpus_documents(path), CORPUS_BATCH)):
            for source_id, error in outcomes:
                if error is None:
                    report.uploaded += 1
                else:
                    report.failures[source_id] = error
    return report


def batched(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    """Lists of `size` items in order, the last one shorter (itertools.batched is Python 3.12+)."""
    batch: list[Item] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _item_error(result: Json) -> str | None:
    error = result.get("error")
    return None if not error else f"{error['title']}: {error['detail']}"


def evaluation_body(
    set_id: str,
    *,
    mode: str | None,
    settings: Json,
    compare_mode: str | None,
    compare_settings: Json | None,
    max_queries: int | None,
    depth: int,
) -> Json:
    body: Json = {"question_set_id": set_id, "settings": settings, "depth": depth}
    if mode:
        body["mode"] = mode
    if max_queries is not None:
        body["max_queries"] = max_queries
    if compare_mode or compare_settings is not None:
        body["compare"] = {"settings": compare_settings or {}, **({"mode": compare_mode} if compare_mode else {})}
    return body


def metric_lines(result: Json) -> list[str]:
    """The means of each run as a table (and the comparison's difference and wins/losses/ties)."""
    names = list(result.get("metrics", {}))
    compare: Json | None = result.get("compare")
    header = ["RUN", *names]
    rows = [header, [_run_label(result), *_values(result, names)]]
    if compare:
        rows.append([_run_label(compare), *_values(compare, names)])
        per_metric: dict[str, Any] = compare.get("per_metric", {})
        rows.append(["delta", *(f"{per_metric[name]['delta']:+.4f}" for name in names)])
        rows.append(["wins/losses/ties", *(_wlt(per_metric[name]) for name in names)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.append(f"{result.get('queries', 0)} queries, depth {result.get('depth')}, {result.get('took_ms', 0):.0f} ms")
    return lines


def _run_label(run: Json) -> str:
    """The mode and every setting the run overrode: two runs that differ in any setting read differently."""
    settings = {key: value for key, value in (run.get("settings") or {}).items() if value is not None}
    shown = ", ".join(f"{key} {_setting_text(value)}" for key, value in settings.items())
    return f"{run.get('mode')}" + (f" ({shown})" if shown else "")


def _setting_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _values(run: Json, names: list[str]) -> list[str]:
    return [f"{float(run['metrics'][name]):.4f}" for name in names]


def _wlt(comparison: Json) -> str:
    return f"{comparison['wins']}/{comparison['losses']}/{comparison['ties']}"
