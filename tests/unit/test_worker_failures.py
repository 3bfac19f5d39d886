"""The worker's failure policy: which errors are retried, and what a user reads when one is not."""

from __future__ import annotations

from sqlalchemy.exc import OperationalError

from ragkb_core.errors import InvalidInput, Unavailable
from ragkb_worker.failures import failure_reason, is_transient


def database_gone() -> OperationalError:
    return OperationalError("SELECT 1", {}, ConnectionRefusedError("connection refused"))


def test_a_database_that_does_not_answer_is_retried_like_an_unreachable_retriever() -> None:
    assert is_transient(database_gone())
    assert is_transient(Unavailable("retriever unreachable"))
    assert not is_transient(InvalidInput("bad"))
    assert not is_transient(ValueError("a bug"))


def test_a_database_outage_past_the_retries_is_told_as_such() -> None:
    assert failure_reason(database_gone(), "ingesting") == "the metadata database did not answer while ingesting"
    assert failure_reason(InvalidInput("too many pages"), "ingesting") == "too many pages"
