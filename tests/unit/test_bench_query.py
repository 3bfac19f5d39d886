"""bench/query.py: its private stack embeds every question (the retriever's query-vector cache off), and its
report says which way the figures were measured."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.bench import bench_module

QUERY = bench_module("query")


def test_the_private_stack_starts_with_the_query_vector_cache_of_the_command_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[dict[str, str]] = []

    @contextmanager
    def recording_stack(repo: Path, workdir: Path, **overrides: str) -> Iterator[SimpleNamespace]:
        started.append(overrides)
        yield SimpleNamespace(address="private")

    monkeypatch.setattr(QUERY, "private_stack", recording_stack)
    for size in (0, 4096):
        with QUERY.stack_for(argparse.Namespace(url=None, query_cache_size=size, env=[])) as address:
            assert address == "private"
    with QUERY.stack_for(argparse.Namespace(url=None, query_cache_size=0, env=["RAGKB_TASKS__NICE=19"])):
        pass
    assert started == [
        {QUERY.QUERY_CACHE_ENV: "0"},
        {QUERY.QUERY_CACHE_ENV: "4096"},
        {QUERY.QUERY_CACHE_ENV: "0", "RAGKB_TASKS__NICE": "19"},
    ]
    assert QUERY.QUERY_CACHE_ENV == "RAGKB_RETRIEVER__QUERY_CACHE_SIZE"


@pytest.mark.parametrize(
    ("size", "said"),
    [
        (0, "Query-vector cache off: every search embedded its question."),
        (4096, "Query-vector cache of 4096: a question asked again"),
        (None, "The running stack's query-vector cache answered repeated questions."),
    ],
)
def test_the_report_says_whether_questions_were_embedded(size: int | None, said: str) -> None:
    result: dict[str, Any] = {"corpus": "SciFact", "queries_per_mode": 10, "top_k": 10, "scales": []}
    assert said in QUERY.markdown(result | {"query_cache_size": size})
