"""The worker embeds each document with its KB's model: the ingest pipeline picks the embedder by the claim's
`embedding_model`, and a document whose KB switched models while it was embedded is not written with the old
model's vectors (it is retried with the new one)."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from ragkb_analyzer import bm25_encoder_for
from ragkb_core.contracts import DocumentPoints
from ragkb_core.kb_settings import KbAnalyzer, KbChunking
from ragkb_core.settings import AnalyzerSettings, LimitSettings
from ragkb_store.blobs import BlobStore
from ragkb_store.ledger import BuiltVersion, Claim, FinishedVersions
from ragkb_worker.pipeline import EmbeddingModelChanged, IngestPipeline

TEXT = "Bicycles are parked in the underground garage behind gate B. The garage opens at six."


class WordModel:
    """A stand-in embedding model: words as tokens, and a constant vector of its own size."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.passages = 0

    def token_offsets(self, text: str) -> list[tuple[int, int]]:
        return [match.span() for match in re.finditer(r"\S+", text)]

    def embed_passages(self, texts: list[str]) -> NDArray[np.float32]:
        self.passages += len(texts)
        return np.full((len(texts), self.dimension), 0.1, dtype=np.float32)


class FakeLedger:
    """Renewals answer the document as the database holds it: the KB's model may have changed meanwhile."""

    def __init__(self, model_after_first_renewal: str | None = None, switch_at_renewal: int = 2) -> None:
        self.model_after_first_renewal = model_after_first_renewal
        self.switch_at_renewal = switch_at_renewal
        self.renewals = 0
        self.finished: list[Claim] = []

    def renew(self, claim: Claim) -> Claim:
        self.renewals += 1
        if self.model_after_first_renewal and self.renewals >= self.switch_at_renewal:
            return dataclasses.replace(claim, embedding_model=self.model_after_first_renewal)
        return claim

    def renew_many(self, claims: Iterable[Claim]) -> dict[str, Claim]:
        return {claim.document_id: self.renew(claim) for claim in claims}

    def finish_many(self, builds: list[BuiltVersion]) -> FinishedVersions:
        self.finished.extend(built.claim for built in builds)
        return FinishedVersions({built.claim.document_id for built in builds}, {})

    def unreferenced_blobs(self, shas: set[str]) -> set[str]:
        return set()


class FakeRetriever:
    def __init__(self) -> None:
        self.written: list[DocumentPoints] = []
        self.batches: list[list[str]] = []

    def write_document(self, points: DocumentPoints, *, generation: int | None = None) -> None:
        self.written.append(points)

    def write_documents(self, kb_id: str, documents: list[DocumentPoints]) -> None:
        self.batches.append([points.document_id for points in documents])
        self.written.extend(documents)

    def delete_document(self, *args: object, **kwargs: object) -> None:
        pass


@pytest.fixture
def models() -> dict[str, WordModel]:
    return {"multilingual-e5-small": WordModel(384), "wide-model": WordModel(768)}


def _pipeline(
    tmp_path: Path,
    ledger: FakeLedger,
    retriever: FakeRetriever,
    models: dict[str, WordModel],
    renew_after_s: float = 0.0,
) -> tuple[IngestPipeline, Claim]:
    blobs = BlobStore(tmp_path / "blobs")
    claim = Claim(
        document_id="doc-1",
        kb_id="kb-1",
        source_id="bicycles.txt",
        version=1,
        title="bicycles",
        media_type="text/plain",
        blob_sha256=blobs.put(TEXT.encode()),
        labels=[],
        metadata={},
        doc_type="knowledge",
        attempt=1,
        chunking=KbChunking(),
        analyzer=KbAnalyzer(),
        embedding_model="wide-model",
    )
    pipeline = IngestPipeline(
        ledger=ledger,  # type: ignore[arg-type]
        blobs=blobs,
        encoder_for=lambda model, _precision: models[model],
        bm25_for=functools.partial(bm25_encoder_for, settings=AnalyzerSettings()),
        retriever=retriever,  # type: ignore[arg-type]
        limits=LimitSettings(),
        renew_after_s=renew_after_s,
    )
    return pipeline, claim


def test_a_document_is_embedded_with_its_kbs_model(tmp_path: Path, models: dict[str, WordModel]) -> None:
    ledger, retriever = FakeLedger(), FakeRetriever()
    pipeline, claim = _pipeline(tmp_path, ledger, retriever, models)
    assert pipeline.run(claim).status == "done"
    assert [len(chunk.dense) for chunk in retriever.written[0].chunks] == [768]
    assert models["multilingual-e5-small"].passages == 0


def test_a_model_switch_during_embedding_writes_nothing_and_retries(
    tmp_path: Path, models: dict[str, WordModel]
) -> None:
    ledger, retriever = FakeLedger(model_after_first_renewal="multilingual-e5-small"), FakeRetriever()
    pipeline, claim = _pipeline(tmp_path, ledger, retriever, models)
    with pytest.raises(EmbeddingModelChanged) as changed:
        pipeline.run(claim)
    assert changed.value.transient and "multilingual-e5-small" in changed.value.detail
    assert retriever.written == [] and ledger.finished == []


def test_a_fresh_claim_is_renewed_once_before_the_write_and_still_notices_a_model_switch(
    tmp_path: Path, models: dict[str, WordModel]
) -> None:
    """A short document's claim is moments old when it is embedded: no renewal then, but the one before the write
    still checks the version and the model."""
    ledger = FakeLedger()
    pipeline, claim = _pipeline(tmp_path, ledger, FakeRetriever(), models, renew_after_s=60)
    assert pipeline.run(claim).status == "done"
    assert ledger.renewals == 1

    switched, retriever = FakeLedger("multilingual-e5-small", switch_at_renewal=1), FakeRetriever()
    pipeline, claim = _pipeline(tmp_path, switched, retriever, models, renew_after_s=60)
    with pytest.raises(EmbeddingModelChanged):
        pipeline.run(claim)
    assert retriever.written == [] and switched.finished == []


def test_a_claim_older_than_the_bound_is_renewed_before_embedding(tmp_path: Path, models: dict[str, WordModel]) -> None:
    ledger = FakeLedger()
    pipeline, claim = _pipeline(tmp_path, ledger, FakeRetriever(), models, renew_after_s=0)
    assert pipeline.run(claim).status == "done"
    assert ledger.renewals == 2


def _companion(pipeline_claim: Claim, tmp_path: Path, n: int, data: bytes, media_type: str = "text/plain") -> Claim:
    blob = BlobStore(tmp_path / "blobs").put(data)
    return dataclasses.replace(
        pipeline_claim, document_id=f"doc-{n}", source_id=f"{n}.txt", media_type=media_type, blob_sha256=blob
    )


def test_a_batch_is_one_write_and_a_bad_document_fails_alone(tmp_path: Path, models: dict[str, WordModel]) -> None:
    ledger, retriever = FakeLedger(), FakeRetriever()
    pipeline, claim = _pipeline(tmp_path, ledger, retriever, models)
    broken = _companion(claim, tmp_path, 2, b"%PDF-1.7\nthis file stops here", "application/pdf")
    other = _companion(claim, tmp_path, 3, b"The cafeteria opens at noon on weekdays.")

    batch = pipeline.run_batch([claim, broken, other])

    assert retriever.batches == [["doc-1", "doc-3"]]
    assert [(outcome.document_id, outcome.status) for outcome in batch.outcomes] == [
        ("doc-1", "done"),
        ("doc-3", "done"),
    ]
    assert [(failed.document_id, type(error).__name__) for failed, error in batch.failed] == [("doc-2", "ParseFailed")]
    assert [built.document_id for built in ledger.finished] == ["doc-1", "doc-3"]
    assert all(set(outcome.stage_seconds) >= {"parse", "chunk", "embed", "index"} for outcome in batch.outcomes)


def test_a_model_switch_during_a_batch_writes_nothing(tmp_path: Path, models: dict[str, WordModel]) -> None:
    ledger, retriever = (
        FakeLedger(model_after_first_renewal="multilingual-e5-small", switch_at_renewal=1),
        FakeRetriever(),
    )
    pipeline, claim = _pipeline(tmp_path, ledger, retriever, models)
    other = _companion(claim, tmp_path, 2, b"The cafeteria opens at noon on weekdays.")

    batch = pipeline.run_batch([claim, other])

    assert retriever.written == [] and ledger.finished == []
    assert {type(error) for _, error in batch.failed} == {EmbeddingModelChanged}
    assert all(error.transient for _, error in batch.failed)  # type: ignore[attr-defined]


def test_documents_past_the_parse_budget_are_left_for_another_batch(
    tmp_path: Path, models: dict[str, WordModel]
) -> None:
    ledger, retriever = FakeLedger(), FakeRetriever()
    pipeline, claim = _pipeline(tmp_path, ledger, retriever, models)
    later = [_companion(claim, tmp_path, n, f"Note {n} about the garage.".encode()) for n in (2, 3)]

    batch = pipeline.run_batch([claim, *later], parse_budget_s=1e-9)

    assert [outcome.document_id for outcome in batch.outcomes] == ["doc-1"]
    assert batch.not_started == later and batch.failed == []
