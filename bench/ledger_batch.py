"""The ledger's CPU per document for a batch of short documents, transition by transition: the claim of the first,
the companions' claim, the renewal after embedding, and the finish that makes the batch live (what a task process
spends outside the model for each document of an import, bench/ingest_profile.py's "ledger" rows). In process,
on a migrated database of its own (SQLite in a temporary folder, as `make run` has, or `--database-url`).
`--history N` first records N finished ingest runs, as a KB's earlier uploads leave them in the jobs table (one
row per upload ever made), so that a step whose cost grows with that table shows it.

To compare two checkouts, run it twice, once with the other's store package first on the path:

    python bench/ledger_batch.py [--batches 60] [--batch 8] [--history 0] [--database-url URL] [--label NAME]
    PYTHONPATH=/other/checkout/libs/store/src python bench/ledger_batch.py --label before
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from common import save_result
from sqlalchemy import insert
from sqlalchemy.orm import Session, sessionmaker

import ragkb_store
from ragkb_core.ids import new_id
from ragkb_core.settings import DatabaseSettings
from ragkb_store.db.engine import build_engine, build_session_factory, migrate_to_head, transaction
from ragkb_store.db.models import Document, Job, KnowledgeBase
from ragkb_store.ledger import BuiltVersion, Claim, DocumentLedger, NewVersion

T = TypeVar("T")
TRANSITIONS = ("claim", "claim_companions", "renew_many", "finish_many")


def new_version(kb_id: str, number: int) -> NewVersion:
    source_id = f"note-{number}.md"
    return NewVersion(
        kb_id=kb_id,
        source_id=source_id,
        title=None,
        default_title=source_id,
        filename=None,
        media_type="text/markdown",
        size_bytes=100,
        blob_sha256=f"{kb_id}{number}".encode().hex().ljust(64, "0")[:64],
        labels=[],
        metadata={},
        doc_type="knowledge",
    )


def timed(seconds: dict[str, float], name: str, step: Callable[..., T], *args: Any) -> T:
    """Adds the step's CPU time to `seconds[name]` and its wall time to `seconds["wall " + name]`: a database
    server's work (PostgreSQL) shows only in the wall time."""
    started, started_wall = time.process_time(), time.perf_counter()
    result = step(*args)
    seconds[name] = seconds.get(name, 0.0) + time.process_time() - started
    seconds[f"wall {name}"] = seconds.get(f"wall {name}", 0.0) + time.perf_counter() - started_wall
    return result


def record_history(sessions: sessionmaker[Session], kb_id: str, uploads: int) -> None:
    """`uploads` documents of the KB, indexed, each with its finished ingest run, as earlier uploads leave them."""
    finished = {"kind": "ingest", "kb_id": kb_id, "status": "succeeded", "counts": {}, "errors": [], "params": {}}
    indexed = {"kb_id": kb_id, "title": "t", "media_type": "text/markdown", "size_bytes": 100, "status": "done"}
    for start in range(0, uploads, 10_000):
        ids = [new_id() for _ in range(min(10_000, uploads - start))]
        documents = [indexed | {"id": i, "source_id": f"old-{i}.md", "blob_sha256": i.ljust(64, "0")} for i in ids]
        with transaction(sessions) as session:
            session.execute(insert(Document), documents)
            session.execute(insert(Job), [finished | {"id": new_id(), "document_id": i} for i in ids])


def sweep(ledger: DocumentLedger) -> dict[str, float]:
    """CPU and wall ms of the statements the worker's sweeper runs every 30 s (ragkb_worker.sweeper)."""
    seconds: dict[str, float] = {}
    timed(seconds, "sweep", ledger.release_expired_leases)
    timed(seconds, "sweep", ledger.pending_older_than, timedelta(minutes=5))
    timed(seconds, "sweep", ledger.finish_overdue_jobs, 3600.0)
    return {"cpu_ms": round(1000 * seconds["sweep"], 2), "wall_ms": round(1000 * seconds["wall sweep"], 2)}


def run_batches(sessions: sessionmaker[Session], batches: int, batch: int, history: int = 0) -> dict[str, float]:
    """CPU seconds per transition over `batches` batches of `batch` pending documents of one KB."""
    ledger = DocumentLedger(sessions, lease_s=600)
    kb_id = new_id()
    with transaction(sessions) as session:
        session.add(KnowledgeBase(id=kb_id, name=f"kb-{kb_id}", embedding_model="m", analyzer_version="a"))
    record_history(sessions, kb_id, history)
    ids = [ledger.record_version(new_version(kb_id, number)).document.id for number in range(batches * batch)]
    seconds: dict[str, float] = {}
    for start in range(0, len(ids), batch):
        # The oldest pending document, as a task's message names it; its companions are the next oldest.
        leader = ids[start]
        first = timed(seconds, "claim", ledger.claim, leader)
        assert first is not None
        companions = timed(seconds, "claim_companions", ledger.claim_companions, first, batch - 1, 1 << 20)
        claims: list[Claim] = [first, *companions]
        current = timed(seconds, "renew_many", ledger.renew_many, claims)
        builds = [BuiltVersion(current[c.document_id], 1, {"embed": 0.01}, {"chunks": 1}, None) for c in claims]
        finished = timed(seconds, "finish_many", ledger.finish_many, builds)
        assert len(finished.finished) == batch, "every version of the batch goes live"
    return seconds | {f"sweep {name}": ms for name, ms in sweep(ledger).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--history", type=int, default=0, help="finished ingest runs recorded before the batches")
    parser.add_argument("--repeats", type=int, default=3, help="fresh databases; the median of each transition")
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temporary folder")
    parser.add_argument("--label", default="run")
    args = parser.parse_args()
    documents = args.batches * args.batch
    runs: list[dict[str, float]] = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="ragkb-ledger-batch-") as folder:
            engine = build_engine(DatabaseSettings(url=args.database_url or f"sqlite:///{Path(folder) / 'l.db'}"))
            migrate_to_head(engine)
            runs.append(run_batches(build_session_factory(engine), args.batches, args.batch, args.history))
            engine.dispose()

    def per_document(names: tuple[str, ...]) -> dict[str, float]:
        ms = {name: round(1000 * statistics.median(run[name] for run in runs) / documents, 3) for name in names}
        return ms | {"all": round(sum(ms.values()), 3)}

    result: dict[str, Any] = {
        "store_package": str(Path(ragkb_store.__file__).parent),
        "database": "sqlite" if args.database_url is None else args.database_url.split(":", 1)[0],
        "batches": args.batches,
        "batch": args.batch,
        "history": args.history,
        "repeats": args.repeats,
        "one_sweep": {
            name: round(statistics.median(run[f"sweep {name}"] for run in runs), 2) for name in ("cpu_ms", "wall_ms")
        },
        "cpu_ms_per_document": per_document(TRANSITIONS),
        "wall_ms_per_document": {
            name.removeprefix("wall "): ms for name, ms in per_document(tuple(f"wall {t}" for t in TRANSITIONS)).items()
        },
    }
    table = "\n".join(
        [
            f"Ledger CPU per document, batches of {args.batch} ({result['database']}, {args.history} earlier "
            f"uploads, store package {result['store_package']}, median of {args.repeats}):",
            "",
            "| transition | CPU ms per document | wall ms per document |",
            "|---|---|---|",
            *(
                f"| {name} | {ms} | {result['wall_ms_per_document'][name]} |"
                for name, ms in result["cpu_ms_per_document"].items()
            ),
            "",
            f"One sweep (the worker's sweeper, every 30 s): {result['one_sweep']['cpu_ms']} ms CPU, "
            f"{result['one_sweep']['wall_ms']} ms wall.",
        ]
    )
    save_result(f"ledger-batch-{args.label}", result, table)


if __name__ == "__main__":
    main()
