"""What an ingest task does with its message and its batch's outcome (ragkb_worker.tasks): the message's documents
are its batch, and those it could not take go back to the queue; a failure of the batch as a whole hands the
companions back and builds the claimed document alone; each document's own error fails it alone, or hands it
back when transient with tries left; documents the batch did not start go back to the queue."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ragkb_core.errors import ParseFailed, Unavailable
from ragkb_core.kb_settings import KbAnalyzer, KbChunking
from ragkb_store.ledger import Claim
from ragkb_worker.pipeline import BatchOutcome, IngestOutcome
from ragkb_worker.settings import BatchSettings
from ragkb_worker.tasks import Ingest, hand_back, run_batch, run_ingest


def claim(n: int, attempt: int = 1) -> Claim:
    return Claim(
        document_id=f"doc-{n}",
        kb_id="kb",
        source_id=f"{n}.md",
        version=1,
        title=f"{n}",
        media_type="text/markdown",
        blob_sha256="0" * 64,
        labels=[],
        metadata={},
        doc_type="knowledge",
        attempt=attempt,
        chunking=KbChunking(),
        analyzer=KbAnalyzer(),
        embedding_model="m",
    )


class Ledger:
    def __init__(self, down: bool = False, takable: tuple[str, ...] = ()) -> None:
        self.down = down
        self.takable = list(takable)  # the documents a claim can take, in the database's order of companions
        self.released: list[str] = []
        self.failed: list[tuple[str, str]] = []
        self.preferred: list[str] = []

    def claim_first(self, document_ids: list[str]) -> Claim | None:
        first = next((document_id for document_id in document_ids if document_id in self.takable), None)
        if first is None:
            return None
        self.takable.remove(first)
        return claim(int(first.removeprefix("doc-")))

    def claim_companions(self, leader: Claim, limit: int, max_bytes: int, preferred: list[str]) -> list[Claim]:
        self.preferred = preferred
        taken = [d for d in preferred if d in self.takable] + [d for d in self.takable if d not in preferred]
        taken = taken[:limit]
        self.takable = [d for d in self.takable if d not in taken]
        return [claim(int(document_id.removeprefix("doc-"))) for document_id in taken]

    def release_for_retry(self, claim: Claim, reason: str) -> None:
        if self.down:
            raise ConnectionError("the database is down")
        self.released.append(claim.document_id)

    def fail(self, claim: Claim, reason: str) -> None:
        self.failed.append((claim.document_id, reason))


class Pipeline:
    def __init__(self, batch: BatchOutcome | Exception) -> None:
        self.batch = batch
        self.alone: list[str] = []

    def run_batch(self, claims: list[Claim], parse_budget_s: float) -> BatchOutcome:
        if isinstance(self.batch, Exception):
            raise self.batch
        return self.batch

    def run(self, claim: Claim) -> IngestOutcome:
        self.alone.append(claim.document_id)
        return IngestOutcome(claim.document_id, "done", 1, {})


def ingest(ledger: Ledger, pipeline: Pipeline, sent: list[list[str]]) -> Ingest:
    return Ingest(ledger, pipeline, BatchSettings(), sent.append)  # type: ignore[arg-type]


TASK: Any = SimpleNamespace(request=SimpleNamespace(retries=0))


def test_a_batch_failing_as_a_whole_hands_back_the_companions_and_builds_the_claimed_one_alone() -> None:
    ledger, pipeline, sent = Ledger(), Pipeline(Unavailable("the retriever did not answer")), []
    leader, companions = claim(1), [claim(2), claim(3)]

    result = run_batch(TASK, ingest(ledger, pipeline, sent), leader, companions, max_retries=5)

    assert ledger.released == ["doc-2", "doc-3"] and sent == [["doc-2", "doc-3"]]
    assert pipeline.alone == ["doc-1"] and result["status"] == "done"


def test_each_documents_own_error_settles_it_alone() -> None:
    outcome = BatchOutcome(
        outcomes=[IngestOutcome("doc-1", "done", 1, {})],
        failed=[
            (claim(2), ParseFailed("the PDF could not be read")),
            (claim(3), Unavailable("the retriever did not answer")),
            (claim(4, attempt=6), Unavailable("the retriever did not answer")),
        ],
        not_started=[claim(5)],
    )
    ledger, sent = Ledger(), []

    result = run_batch(TASK, ingest(ledger, Pipeline(outcome), sent), claim(1), [claim(n) for n in (2, 3, 4, 5)], 5)

    assert result == {"document_id": "doc-1", "status": "done", "batch": 5}
    assert [document_id for document_id, _ in ledger.failed] == ["doc-2", "doc-4"]  # doc-4 is out of tries
    assert "PDF" in dict(ledger.failed)["doc-2"]
    assert ledger.released == ["doc-3", "doc-5"] and sent == [["doc-3"], ["doc-5"]]


def test_handing_back_with_the_database_down_leaves_the_documents_to_the_sweeper() -> None:
    ledger, sent = Ledger(down=True), []
    hand_back(ingest(ledger, Pipeline(BatchOutcome()), sent), [claim(2)], "its batch failed")
    assert ledger.released == [] and sent == []


def test_a_message_is_built_as_one_batch_and_what_it_could_not_take_is_queued_again() -> None:
    # doc-1 was built by another batch; doc-9 is not takable as a companion (too large); doc-7 waits elsewhere.
    ledger = Ledger(takable=("doc-2", "doc-3", "doc-4", "doc-7"))
    outcome = BatchOutcome(outcomes=[IngestOutcome(f"doc-{n}", "done", 1, {}) for n in (2, 3, 4, 7)])
    sent: list[list[str]] = []
    message = ["doc-1", "doc-2", "doc-3", "doc-4", "doc-9"]

    result = run_ingest(TASK, ingest(ledger, Pipeline(outcome), sent), message, max_retries=5)

    assert result == {"document_id": "doc-2", "status": "done", "batch": 4}
    assert ledger.preferred == message  # the message's own documents are its companions first
    assert sent == [["doc-1", "doc-9"]]  # the ledger's queue places keep those still pending: doc-9


def test_a_message_whose_documents_were_all_built_meanwhile_is_skipped() -> None:
    sent: list[list[str]] = []
    result = run_ingest(TASK, ingest(Ledger(), Pipeline(BatchOutcome()), sent), ["doc-1", "doc-2"], max_retries=5)
    assert result == {"document_ids": ["doc-1", "doc-2"], "status": "skipped"} and sent == []
