"""Every change of a document's or a job's state, in one place: ragkb_store.ledger.documents (record a
version, claim, renew, finish, fail, release, retry, delete), ragkb_store.ledger.jobs (record a job and its
items, settle them, delete a KB's rows) and ragkb_store.ledger.ranges (a long document built in page ranges).
A test keeps status writes out of every other module."""

from ragkb_store.ledger.documents import (
    EVERY_DOCUMENT,
    BatchOutcome,
    BuiltVersion,
    ChangedFields,
    Claim,
    DocumentLedger,
    DocumentScope,
    FinishedVersions,
    LaneCounts,
    NewVersion,
    QueuePlace,
    RecordedVersion,
    RestoredDocument,
    claim_of,
)

__all__ = [
    "EVERY_DOCUMENT",
    "BatchOutcome",
    "BuiltVersion",
    "ChangedFields",
    "Claim",
    "DocumentLedger",
    "DocumentScope",
    "FinishedVersions",
    "LaneCounts",
    "NewVersion",
    "QueuePlace",
    "RecordedVersion",
    "RestoredDocument",
    "claim_of",
]
